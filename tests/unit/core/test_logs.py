"""Logs a person can read on a terminal and a machine can parse elsewhere, and
lines logged while the event loop runs are written together, once per
iteration, without losing or reordering any."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from gateway.core.config import Config
from gateway.core.logs import JsonFormatter, LoopBatchingHandler, TextFormatter, choose_format, configure_logging


class CountingStream(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: Any) -> int:
        self.writes += 1
        return super().write(data)


def access_record(**facts: Any) -> logging.LogRecord:
    record = logging.LogRecord("relayroom.access", logging.INFO, __file__, 1, "request", None, None)
    for key, value in {"request_id": "0123456789abcdef", "method": "POST", "route": "/v1/attestations",
                       "status": 201, "ms": 3.14, **facts}.items():
        setattr(record, key, value)
    return record


def test_an_access_line_in_text_reads_as_a_sentence() -> None:
    line = TextFormatter().format(access_record())
    clock, level, rest = line.split(" ", 2)
    time.strptime(clock.split(".")[0], "%H:%M:%S")
    assert level == "info"
    assert rest.strip() == "POST /v1/attestations 201 3.14 ms  request_id=0123456789abcdef"


def test_other_lines_in_text_name_their_logger_and_facts() -> None:
    record = logging.LogRecord("relayroom.oidc", logging.WARNING, __file__, 1, "keys of %s unavailable",
                               ("https://issuer",), None)
    record.issuer = "https://issuer"
    record.secret_header = "Bearer abc"  # not whitelisted: never printed
    line = TextFormatter().format(record)
    assert " warning relayroom.oidc: keys of https://issuer unavailable  issuer=https://issuer" in line
    assert "Bearer" not in line


def test_json_lines_carry_the_same_facts() -> None:
    out = json.loads(JsonFormatter().format(access_record()))
    assert out["route"] == "/v1/attestations" and out["status"] == 201 and out["request_id"] == "0123456789abcdef"
    assert out["ts"].endswith("Z") and out["level"] == "info"


def test_auto_is_text_on_a_terminal_and_json_on_a_pipe() -> None:
    primary, secondary = os.openpty()
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(os.dup(secondary), "w") as tty, os.fdopen(os.dup(write_end), "w") as pipe:
            assert choose_format("auto", tty) == "text"
            assert choose_format("auto", pipe) == "json"
            assert choose_format("json", tty) == "json" and choose_format("text", pipe) == "text"
    finally:
        for fd in (primary, secondary, read_end, write_end):
            os.close(fd)
    with pytest.raises(ValueError):
        choose_format("yaml")


def test_the_setting_refuses_an_unknown_format() -> None:
    assert Config.from_env({"RELAYROOM_LOG_FORMAT": "TEXT"}).log_format == "text"
    assert Config.from_env({}).log_format == "auto"
    with pytest.raises(ValueError, match="RELAYROOM_LOG_FORMAT"):
        Config.from_env({"RELAYROOM_LOG_FORMAT": "xml"})


@pytest.fixture
def batching() -> Iterator[tuple[logging.Logger, CountingStream]]:
    stream = CountingStream()
    handler = LoopBatchingHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("relayroom.test_batching")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def test_lines_of_one_loop_iteration_are_written_together(batching: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batching

    async def burst() -> tuple[int, int]:
        for n in range(50):
            logger.info("line %d", n)
        held = stream.writes
        await asyncio.sleep(0)  # one iteration: the scheduled flush runs
        await asyncio.sleep(0)
        return held, stream.writes

    held, after = asyncio.run(burst())
    assert held == 0 and after == 1
    lines = [json.loads(line)["msg"] for line in stream.getvalue().decode().splitlines()]
    assert lines == [f"line {n}" for n in range(50)]


def test_warnings_and_lines_outside_the_loop_are_written_at_once(batching: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batching
    logger.info("outside any loop")
    assert stream.writes == 1

    async def warn() -> int:
        logger.info("held")
        logger.warning("urgent")  # written now, with what was held before it, in order
        return stream.writes

    assert asyncio.run(warn()) == 2
    assert [json.loads(x)["msg"] for x in stream.getvalue().decode().splitlines()] == ["outside any loop", "held", "urgent"]


def test_configure_logging_on_a_text_stream_still_works() -> None:
    buffer = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("info", "json", stream=buffer)
        logging.getLogger("relayroom.access").info("request", extra={"route": "/healthz", "status": 200})
        assert json.loads(buffer.getvalue())["route"] == "/healthz"
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_relayroom_serve_on_a_terminal_writes_text_lines(tmp_path: Path) -> None:
    """The real process with its stderr on a pseudo-terminal, as a person runs it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env.update(RELAYROOM_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}", RELAYROOM_CHECKMAPS=str(tmp_path),
               PYTHONPATH=str(repo))
    primary, secondary = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], env=env, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=secondary)
    os.close(secondary)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        answered = None
        while time.monotonic() < deadline and b"/healthz 200" not in seen:
            if answered is None:
                try:
                    answered = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                except httpx.HTTPError:
                    time.sleep(0.1)
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(primary, 65536)
                except OSError:
                    break
        assert answered is not None and answered.status_code == 200
    finally:
        proc.terminate()
        proc.wait(20)
        os.close(primary)
    text = seen.decode(errors="replace")
    line = next(x for x in text.splitlines() if "/healthz 200" in x)
    assert " info    GET /healthz 200 " in line and f"request_id={answered.headers['x-request-id']}" in line
    assert not any(x.lstrip().startswith("{") for x in text.splitlines() if x.strip())  # no JSON on a terminal


def test_a_loop_that_closes_before_its_flush_does_not_hold_later_lines(
        batching: tuple[logging.Logger, CountingStream]) -> None:
    logger, stream = batching

    first = asyncio.new_event_loop()

    async def log_and_leave() -> None:
        logger.info("last line of a loop")  # schedules a flush on this loop...
        first.stop()  # ...which stops before its next turn runs it

    first.run_until_complete(log_and_leave())
    first.close()
    assert stream.writes == 0

    async def next_loop() -> None:
        logger.info("first line of the next loop")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(next_loop())
    assert [json.loads(x)["msg"] for x in stream.getvalue().decode().splitlines()] == [
        "last line of a loop", "first line of the next loop"]


def test_noted_facts_ride_on_the_request_line_or_make_a_line_outside_a_request() -> None:
    from gateway.core.logs import REQUEST_FACTS, note

    stream = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    configure_logging("info", "json", stream)
    try:
        attestations = logging.getLogger("relayroom.attestations")
        facts: dict[str, object] = {}
        token = REQUEST_FACTS.set(facts)
        try:
            note(attestations, "attestation", project="acme", check="unit", counted=True)
            logging.getLogger().handlers[0].flush()
            assert stream.getvalue() == ""  # nothing of its own while a request is served
            # A second project's attestation in the same delivery keeps a line of its own.
            note(attestations, "attestation", project="globex", check="unit", counted=False)
        finally:
            REQUEST_FACTS.reset(token)
        assert facts == {"project": "acme", "check": "unit", "counted": True}
        note(attestations, "attestation", project="initech", check="unit", counted=False)  # a command, no request
        logging.getLogger().handlers[0].flush()
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [(line["logger"], line["msg"], line["project"], line["counted"]) for line in lines] == [
            ("relayroom.attestations", "attestation", "globex", False),
            ("relayroom.attestations", "attestation", "initech", False)]
        # A terminal's access line shows the noted facts before the request id.
        text = TextFormatter().format(access_record(project="acme", check="unit", counted=True))
        assert text.endswith("POST /v1/attestations 201 3.14 ms  project=acme check=unit counted=True "
                             "request_id=0123456789abcdef"), text
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
