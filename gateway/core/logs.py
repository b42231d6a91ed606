"""Logs: JSON lines for machines, short text lines for a person at a terminal.

Handlers pass facts as `extra={...}`; only the whitelisted keys below are
emitted, so a stray `extra` holding a header cannot reach the log.

The format (`RELAYROOM_LOG_FORMAT`): `json` writes one JSON object per line;
`text` one short line (`12:00:01.234 info  POST /v1/attestations 201 3.1 ms
...`); `auto`, the default, writes text when stderr is a terminal and JSON
when it is not (a pipe to a service manager, a container runtime, a file).

Writing: at the default level every request logs a line, and a write(2) of
its own to the pipe was a large share of a small request's server time
(docs/decisions/0009).  Lines logged while the event loop runs are kept and written together once
per loop iteration (`loop.call_soon`), so a busy server makes one write for
many requests; a line logged outside the loop, a warning or worse, or a
buffer past 64 KiB is written at once.  A process killed by SIGKILL loses at
most the lines of the loop iteration it was in; the store's promises do not
depend on the log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from contextvars import ContextVar
from typing import IO

from gateway.core import jsonio

# The id of the request being served, set by `GuardMiddleware`: every line
# logged while serving it carries the id, not only the access-log line.
REQUEST_ID: ContextVar[str | None] = ContextVar("relayroom_request_id", default=None)
# Facts about the request being served that its access-log line carries
# (`note`), a dict per request set by `GuardMiddleware`.
REQUEST_FACTS: ContextVar[dict[str, object] | None] = ContextVar("relayroom_request_facts", default=None)

_FIELDS = ("request_id", "method", "route", "status", "ms", "project", "issuer", "check", "code", "counted")
_NOTED = tuple(key for key in _FIELDS if key not in ("request_id", "method", "route", "status", "ms"))
FORMATS = ("auto", "json", "text")


def note(logger: logging.Logger, msg: str, **facts: object) -> None:
    """Log `facts` at info: on the access-log line of the request being
    served, or as a line of their own outside a request, or when the
    request noted such facts already (a webhook delivery that records an
    attestation for each of several projects: each keeps its line).  An
    attestation's facts on the access line cost a few keys, where a second
    line cost a write and the request id again."""
    current = REQUEST_FACTS.get()
    if current is not None and current.keys().isdisjoint(facts):
        current.update(facts)
    elif logger.isEnabledFor(logging.INFO):
        logger.info(msg, extra=facts)


class _Clock:
    """The formatted second, computed once per second (a line every request)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.second = (-1, "")

    def stamp(self, record: logging.LogRecord, gmt: bool) -> str:
        second = int(record.created)
        if self.second[0] != second:
            moment = time.gmtime(second) if gmt else time.localtime(second)
            self.second = (second, time.strftime(self.pattern, moment))
        return f"{self.second[1]}.{int(record.msecs):03d}"


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._clock = _Clock("%Y-%m-%dT%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": self._clock.stamp(record, gmt=True) + "Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in _FIELDS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if "request_id" not in out and REQUEST_ID.get() is not None:
            out["request_id"] = REQUEST_ID.get()
        if record.exc_info:
            # Tracebacks name code lines, not local values, so no secret rides along.
            out["error"] = self.formatException(record.exc_info)
        return jsonio.dumps_text(out)


class TextFormatter(logging.Formatter):
    """`HH:MM:SS.mmm level  message  key=value ...`, local time, for a terminal.

    An access line reads `GET /healthz 200 0.4 ms`; other facts follow as
    key=value; the request id comes last, to grep for."""

    def __init__(self) -> None:
        super().__init__()
        self._clock = _Clock("%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        head = f"{self._clock.stamp(record, gmt=False)} {record.levelname.lower():<7}"
        facts = record.__dict__
        if record.name == "relayroom.access" and "route" in facts:
            message = f"{facts.get('method')} {facts.get('route')} {facts.get('status')} {facts.get('ms')} ms"
            shown: tuple[str, ...] = _NOTED
        else:
            message = record.getMessage()
            if not record.name.startswith("relayroom.access"):
                message = f"{record.name}: {message}"
            shown = _FIELDS
        extras = [f"{key}={facts[key]}" for key in shown if key in facts and key != "request_id"]
        request_id = facts.get("request_id") or REQUEST_ID.get()
        if request_id is not None:
            extras.append(f"request_id={request_id}")
        line = f"{head} {message}" + ("  " + " ".join(extras) if extras else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class LoopBatchingHandler(logging.Handler):
    """Writes formatted lines to a binary stream, batched per event-loop iteration (see the module's doc)."""

    MAX_BUFFER = 64 * 1024

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__()
        self.stream = stream
        self._lines: list[bytes] = []
        self._size = 0
        # The loop a flush is scheduled on: a loop that closes before its
        # callback runs (asyncio.run returning) must not leave later lines
        # waiting, so another loop schedules its own.
        self._scheduled: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "replace")
        except Exception:
            self.handleError(record)
            return
        loop = _running_loop()
        with self._write_lock:
            if loop is None or record.levelno >= logging.WARNING:
                self._lines.append(line)
                self._write_out()
                return
            self._lines.append(line)
            self._size += len(line)
            if self._size >= self.MAX_BUFFER:
                self._write_out()
            elif self._scheduled is not loop:
                self._scheduled = loop
                loop.call_soon(self.flush)

    def flush(self) -> None:
        with self._write_lock:
            self._write_out()

    def _write_out(self) -> None:
        self._scheduled = None
        if not self._lines:
            return
        data = b"".join(self._lines)
        self._lines.clear()
        self._size = 0
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr must not take a request down with it

    @property
    def _write_lock(self) -> threading.RLock:
        # logging.Handler makes an RLock in createLock(); other threads (the
        # store's writer) log too.
        assert self.lock is not None
        return self.lock

    def close(self) -> None:
        self.flush()
        super().close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def choose_format(name: str, stream: IO[str] | None = None) -> str:
    """`json` or `text` for a configured name (`auto` asks whether `stream`, stderr by default, is a terminal)."""
    name = (name or "auto").lower()
    if name not in FORMATS:
        raise ValueError(f"log format {name!r} is not one of {', '.join(FORMATS)}")
    if name != "auto":
        return name
    stream = stream if stream is not None else sys.stderr
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def configure_logging(level: str = "info", fmt: str | None = None, stream: IO[str] | None = None) -> None:
    """Route every log record to stderr (or `stream`) in the chosen format.

    `fmt` defaults to RELAYROOM_LOG_FORMAT (then `auto`), so the workers that
    uvicorn starts, which configure themselves from the environment, agree
    with the process that started them."""
    target = stream if stream is not None else sys.stderr
    chosen = choose_format(fmt if fmt is not None else os.environ.get("RELAYROOM_LOG_FORMAT", "auto"), target)
    binary = getattr(target, "buffer", None)
    handler: logging.Handler
    if binary is not None:
        target.flush()
        handler = LoopBatchingHandler(binary)
    else:  # a text-only stream (a test's StringIO): plain, unbatched
        handler = logging.StreamHandler(target)
    handler.setFormatter(TextFormatter() if chosen == "text" else JsonFormatter())
    root = logging.getLogger()
    for old in root.handlers:
        old.flush()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # The lines carry none of the caller's file and line, thread or
    # process: the logging HOWTO's "Optimization" switches, which spare a walk
    # up the (deep, async) stack on every line.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # uvicorn's own access log repeats ours without the request id.
    logging.getLogger("uvicorn.access").disabled = True
