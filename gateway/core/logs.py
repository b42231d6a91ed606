"""Structured JSON logs: one object per line, with the request id, never a secret.

Handlers pass facts as `extra={...}`; only the whitelisted keys below are
emitted, so a stray `extra` holding a header cannot reach the log.
"""

from __future__ import annotations

import logging
import sys
import time
from contextvars import ContextVar

from gateway.core import jsonio

# The id of the request being served, set by `GuardMiddleware`: every line
# logged while serving it carries the id, not only the access-log line.
REQUEST_ID: ContextVar[str | None] = ContextVar("relayroom_request_id", default=None)

_FIELDS = ("request_id", "method", "route", "status", "ms", "project", "issuer", "check", "code", "counted")


class JsonFormatter(logging.Formatter):
    _second: tuple[int, str] = (-1, "")

    def _timestamp(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if self._second[0] != second:  # a line every request: format the second once
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        return f"{self._second[1]}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": self._timestamp(record),
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


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # The JSON lines carry none of the caller's file and line, thread or
    # process: the logging HOWTO's "Optimization" switches, which spare a walk
    # up the (deep, async) stack on every line.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # uvicorn's own access log repeats ours without the request id.
    logging.getLogger("uvicorn.access").disabled = True
