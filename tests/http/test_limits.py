"""Limits that hold under abuse, through the real network path where the
network path is what is under test.

- Request heads: an Authorization header over 16 KiB, all headers over 64 KiB,
  a head over 128 KiB, a head that never finishes: each answered in the
  contract's error body by a real `relayroom serve` (uvicorn with httptools),
  and an endless header does not grow the server's memory.
- Bodies: over 64 KiB, declared or streamed: 413 before the body is read; a
  body that does not arrive in time after its head: 408 (uvicorn with the
  gateway's protocol and a short timeout), and the gateway takes the cut-off
  as a client that went away, not as its own error.
- OIDC issuers: a discovery or JWKS fetch that hangs, or answers megabytes,
  costs at most the fetch timeout and the size cap, and the CI job is told
  to retry (503 `jwks_unavailable` with Retry-After).
- Check maps: a file over the size cap, a folder over the file cap, a file
  over the binding, check or supported-id cap: reported (FILE:LINE, /readyz,
  `relayroom checkmap check` exits 1) and not loaded.

Query length, page size and the per-principal learn and event budgets are
held in tests/http/test_bad_input.py and tests/http/test_entries_api.py; the one
candidate budget across learn, thread extraction and proposals, the read
budget, and hostile 64 KiB thread messages against a real server in
tests/http/test_attack_budgets.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import uvicorn

from gateway.ci.checkmaps.model import Problem
from gateway.core.clock import SystemClock
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.web.http_limits import MAX_HEAD_BYTES, BoundedHttpToolsProtocol
from tests.support.attest_fixtures import checkmap, github_binding, learn as learn_direct, write_map
from tests.support.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.conftest import LiveServer, free_port, live_setup, make_project
from tests.support.helpers import bearer
from tests.support.oidc_issuer import OidcIssuer
from tests.system.test_crash import REPO, ServeProcess


def assert_error_body(raw: bytes, status: int, code: str) -> None:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head[:100]
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == code and error["message"]


def exchange(port: int, request: bytes, *, timeout: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes or stops talking."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data and _complete(data):
                    break
        except (ConnectionResetError, TimeoutError):
            pass
    return data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _seed(database_url: str) -> str:
    hub = Hub(Config.from_env({}, database_url=database_url, sweep_interval=0.0), clock=SystemClock())
    await hub.start(background=False)
    try:
        await hub.accounts.create_project("acme")
        return await hub.accounts.create_token("acme", "write", "agent-7")
    finally:
        await hub.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """`relayroom serve` as a user runs it, on a fresh SQLite store (one for
    the module: starting a server costs more than these tests)."""
    tmp_path = tmp_path_factory.mktemp("limits")
    (tmp_path / "checkmaps").mkdir()
    env = {
        **os.environ,
        "RELAYROOM_DATABASE_URL": f"sqlite:///{tmp_path / 'relayroom.db'}",
        "RELAYROOM_CHECKMAPS": str(tmp_path / "checkmaps"),
        "RELAYROOM_SWEEP_INTERVAL": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    token = asyncio.run(_seed(env["RELAYROOM_DATABASE_URL"]))
    server = ServeProcess(env, tmp_path / "serve.log")
    server.token = token  # type: ignore[attr-defined]
    try:
        asyncio.run(server.wait_ready())
        yield server
    finally:
        server.stop()


# -- request heads through a real server ---------------------------------------------------


def test_oversized_heads_get_the_contract_body_from_a_real_server(served: ServeProcess) -> None:
    port = served.port

    def get(headers: bytes, target: bytes = b"/v1/projects/acme/entries") -> bytes:
        return exchange(port, b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"Connection: close\r\n\r\n")

    # Over 16 KiB of Authorization, inside the head bound: the middleware answers.
    assert_error_body(get(b"Authorization: Bearer " + b"a" * (17 * 1024) + b"\r\n"), 431, "header_too_large")
    # Many headers, each small, together over 64 KiB.
    many = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"b" * 1000) for n in range(70))
    assert_error_body(get(many), 431, "header_too_large")
    # A head over 128 KiB: refused by the protocol before the app sees it.
    assert_error_body(get(b"Authorization: Bearer " + b"a" * (MAX_HEAD_BYTES + 1024) + b"\r\n"), 431, "header_too_large")
    # A request target over 64 KiB is past what httptools can parse: malformed, still in the contract's body.
    assert_error_body(get(b"", target=b"/v1/projects/acme/recall?q=" + b"q" * (65 * 1024)), 400, "malformed_request")
    assert_error_body(exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n"), 400, "malformed_request")
    assert httpx.get(f"{served.url}/healthz").status_code == 200


@pytest.mark.parametrize("start", [b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ", b"GET /healthz?q="])
def test_an_endless_head_does_not_grow_the_server(served: ServeProcess, start: bytes) -> None:
    pid = served.proc.pid
    before = rss_kib(pid)
    sent = 0
    answer = b""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(start)
        chunk = b"a" * (1 << 20)
        try:
            while sent < 64 * (1 << 20):
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            pass
    grown_mib = (rss_kib(pid) - before) / 1024
    assert sent < 8 * (1 << 20), f"the server read {sent >> 20} MiB of one header before closing"
    assert grown_mib < 16, f"the server grew {grown_mib:.0f} MiB"
    if answer:  # when the reset did not beat it, the refusal is the contract's body
        assert answer.startswith(b"HTTP/1.1 431 ")
    assert httpx.get(f"{served.url}/healthz").status_code == 200


class ShortHeadTimeout(BoundedHttpToolsProtocol):
    head_timeout = 0.5


@contextlib.contextmanager
def serving(app: Any, protocol: type) -> Iterator[int]:
    """uvicorn with `protocol` on 127.0.0.1 in a thread; yields the port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_head_that_never_finishes_is_timed_out(tmp_path: Path) -> None:
    async def hello(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(hello, ShortHeadTimeout) as port:
        started = time.monotonic()
        assert_error_body(exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "), 408, "request_timeout")
        assert_error_body(exchange(port, b""), 408, "request_timeout")  # connected, said nothing
        assert time.monotonic() - started < 5
        # A complete request on the same kind of connection is served as usual.
        assert exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200 ")


def test_the_head_clock_waits_while_an_earlier_request_is_answered() -> None:
    """A pipelined head that is still open while the server answers the
    request before it is the server's delay: no 408 lands inside that answer.
    Once the answers are out, a head left open is timed out as on a fresh
    connection."""
    async def slow(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await asyncio.sleep(1.0)  # twice the head timeout
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(slow, ShortHeadTimeout) as port, socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(0.8)  # the second head has been open past the timeout, the first answer not out yet
        sock.sendall(b"\r\n")
        data = b""
        while data.count(b"\r\n\r\nok") < 2:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        assert data.count(b"HTTP/1.1 200 ") == 2 and b"408" not in data
        sock.sendall(b"GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started, rest = time.monotonic(), b""
        while chunk := sock.recv(65536):
            rest += chunk
        assert_error_body(rest, 408, "request_timeout")
        assert time.monotonic() - started < 2


class FiveConnections(BoundedHttpToolsProtocol):
    max_connections = 5


def test_past_the_connection_cap_the_connection_idle_longest_is_shed() -> None:
    """Each connection past the cap sheds the one that has waited longest for
    a request head, with the contract's 408 body; a connection whose request
    is being answered is never shed, and a kept-alive connection waiting for
    its next request counts as idle from the end of its answer."""
    release = threading.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while scope["path"] == "/slow" and not release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    def read_all(sock: socket.socket) -> bytes:
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data

    with serving(app, FiveConnections) as port, contextlib.ExitStack() as open_:
        connect = lambda: open_.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))  # noqa: E731
        busy = connect()
        busy.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        kept = connect()
        kept.sendall(b"GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")  # kept alive: idle from now on
        time.sleep(0.1)  # the answer's bytes arrive before the server marks the connection idle again
        idle = []
        for _ in range(3):  # accepted, and so counted, in the order they connect
            idle.append(connect())
            idle[-1].sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Never-Ends: ")
        newcomer = connect()  # the sixth: the kept-alive one waited longest
        assert_error_body(read_all(kept), 408, "request_timeout")
        newcomer.sendall(b"GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert read_all(newcomer).startswith(b"HTTP/1.1 200 ")
        # The newcomer was answered and closed: four are open.  A fifth fits,
        # a sixth sheds the oldest idle head.
        late = [connect() for _ in range(2)]
        assert_error_body(read_all(idle[0]), 408, "request_timeout")
        # The busy request was never shed: it is answered once released.
        release.set()
        assert busy.recv(65536).startswith(b"HTTP/1.1 200 ") and len(late) == 2


# -- bodies ---------------------------------------------------------------------------------------


class ShortBodyTimeout(BoundedHttpToolsProtocol):
    body_timeout = 0.5


async def body_app(scope: Any, receive: Any, send: Any) -> None:
    """/read reads the whole body and answers its length; /early answers at
    once and never reads; /late waits past the body timeout, then reads."""
    if scope["path"] == "/late":
        await asyncio.sleep(1.0)
    size = 0
    while scope["path"] != "/early":
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    answer = str(size).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def body_port() -> Iterator[int]:
    with serving(body_app, ShortBodyTimeout) as port:
        yield port


def post(path: str, *headers: bytes) -> bytes:
    return b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def read_response(sock: socket.socket) -> bytes:
    """One response off a connection that stays open (or b"" if it closed)."""
    data = b""
    while not (b"\r\n\r\n" in data and _complete(data)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_body_that_never_finishes_is_timed_out(body_port: int) -> None:
    started = time.monotonic()
    answer = exchange(body_port, post("/read", b"Content-Length: 100") + b"x" * 10)
    assert_error_body(answer, 408, "request_timeout")
    assert b"body" in answer
    answer = exchange(body_port, post("/read", b"Transfer-Encoding: chunked") + b"4\r\nxxxx\r\n")  # never the last chunk
    assert_error_body(answer, 408, "request_timeout")
    assert time.monotonic() - started < 3
    # A byte every 50 ms keeps the connection busy but does not move the bound:
    # it runs from the end of the head, not from the last byte.
    with socket.create_connection(("127.0.0.1", body_port), timeout=3) as sock:
        sock.sendall(post("/read", b"Content-Length: 1000"))
        sock.settimeout(0.05)
        started, answer = time.monotonic(), b""
        while not answer and time.monotonic() - started < 3:
            with contextlib.suppress(OSError):
                sock.sendall(b"x")
            with contextlib.suppress(TimeoutError):
                answer = sock.recv(65536)
        elapsed = time.monotonic() - started
    assert_error_body(answer, 408, "request_timeout")
    assert elapsed < 1.5, f"the dribbled body held the connection {elapsed:.1f} s"


def test_a_body_in_time_is_served_and_leaves_no_timer_behind(body_port: int) -> None:
    with socket.create_connection(("127.0.0.1", body_port), timeout=3) as sock:
        sock.sendall(post("/read", b"Content-Length: 8") + b"abcd")
        time.sleep(0.1)
        sock.sendall(b"efgh")
        answer = read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\n8")
        time.sleep(0.8)  # past the body timeout: nothing of the first request may fire now
        sock.sendall(post("/read", b"Content-Length: 2") + b"ok")
        answer = read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\n2")


def test_the_clock_stops_while_the_server_owes_a_100_continue(body_port: int) -> None:
    with socket.create_connection(("127.0.0.1", body_port), timeout=3) as sock:
        sock.sendall(post("/late", b"Content-Length: 4", b"Expect: 100-continue"))
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 "), interim  # a second after the head, past the timeout
        sock.sendall(b"abcd")
        answer = interim.partition(b"\r\n\r\n")[2] + read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\n4")


def test_a_body_still_arriving_after_the_answer_is_cut_off(body_port: int) -> None:
    with socket.create_connection(("127.0.0.1", body_port), timeout=3) as sock:
        sock.sendall(post("/early", b"Content-Length: 100") + b"x")
        answer = read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200 ")
        started = time.monotonic()
        assert sock.recv(65536) == b""  # closed, with nothing more said
        assert time.monotonic() - started < 1.5


async def test_a_body_cut_off_is_a_client_gone_not_a_gateway_error(
    app: Any, hub: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """What the app sees when the protocol cuts a slow body off: receive()
    answers http.disconnect.  No traceback, no 500 in the metrics."""
    tokens = await make_project(hub, "acme")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/projects/acme/entries", "raw_path": b"/v1/projects/acme/entries", "query_string": b"",
        "root_path": "", "server": ("127.0.0.1", 8750), "client": ("127.0.0.1", 5000),
        "headers": [(b"host", b"127.0.0.1:8750"), (b"content-type", b"application/json"), (b"content-length", b"100"),
                    (b"authorization", f"Bearer {tokens.writer}".encode())],
    }
    events = iter([{"type": "http.request", "body": b'{"kind": ', "more_body": True}, {"type": "http.disconnect"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(events)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with caplog.at_level(logging.INFO):
        await app(scope, receive, send)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert sent[0]["status"] == 499  # for the access log and metrics; uvicorn drops it
    assert b'status="500"' not in hub.metrics.render() and b'status="499"' in hub.metrics.render()


def test_bodies_over_64_kib_are_refused_before_they_are_read(served: ServeProcess) -> None:
    port = served.port
    head = (b"POST /v1/projects/acme/entries HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + served.token.encode() + b"\r\n")  # type: ignore[attr-defined]
    # Declared too large: refused without waiting for a byte of it.
    started = time.monotonic()
    answer = exchange(port, head + b"Content-Length: 10000000000\r\nConnection: close\r\n\r\n", timeout=5)
    assert_error_body(answer, 413, "body_too_large")
    assert time.monotonic() - started < 3
    # Streamed without a length: refused once it passes the limit.
    chunked = b"".join(b"%x\r\n%s\r\n" % (4096, b"x" * 4096) for _ in range(20)) + b"0\r\n\r\n"
    answer = exchange(port, head + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked)
    assert_error_body(answer, 413, "body_too_large")


# -- OIDC issuers that misbehave -------------------------------------------------------------------


class SlowIssuer:
    """An issuer whose discovery document is fine and whose JWKS endpoint
    either hangs or answers far more than any key set needs."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sent = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/.well-known/openid-configuration":
                    body = (b'{"issuer": "%s", "jwks_uri": "%s/.well-known/jwks"}' % (owner.url.encode(), owner.url.encode()))
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if owner.mode == "hang":
                    time.sleep(3)
                    return
                # A small send buffer, so that what `sent` counts is what the
                # gateway read plus little more than its own receive buffer.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
                self.send_response(200)  # no Content-Length: the cap must hold on the stream itself
                self.end_headers()
                try:
                    self.wfile.write(b'{"keys": [], "padding": "')
                    for _ in range(10 * 1024):  # 10 MiB
                        self.wfile.write(b"p" * 1024)
                        owner.sent += 1024
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "SlowIssuer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.parametrize("mode", ["hang", "huge"])
async def test_a_misbehaving_issuer_costs_a_bounded_wait_and_the_job_retries(
    client: httpx.AsyncClient, hub: Any, checkmap_dir: Path, issuer: OidcIssuer, mode: str
) -> None:
    await make_project(hub, "acme")
    entry_id = await learn_direct(hub, "acme", "JWKS fetches are bounded.")
    keys = hub.keys
    keys.fetcher.timeout = 0.5  # the default is 5 s; the bound is what is tested, not its value
    with SlowIssuer(mode) as slow:
        await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(slow.url), {"unit": [entry_id]}))
        token = issuer.github_token(time.time(), iss=slow.url)  # signed by a key the slow issuer never serves
        started = time.monotonic()
        r = await client.post("/v1/attestations", json={"check": "unit", "outcome": "success"}, headers=bearer(token))
        elapsed = time.monotonic() - started
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "jwks_unavailable"
        assert int(r.headers["retry-after"]) >= 1
        assert elapsed < 2.5
        if mode == "huge":
            # The kernel's receive buffer on loopback grows to some MiB under
            # load: what is asserted is that the gateway stopped reading long
            # before the 10 MiB the issuer would send.
            assert slow.sent < 8 * 1024 * 1024, f"the gateway read {slow.sent >> 20} MiB of a key set"
    rows = await hub.driver.read(lambda q: q.count_rows("attestations"))
    assert rows == 0


# -- check map files ----------------------------------------------------------------------------------


async def test_a_check_map_over_the_size_cap_is_reported_and_not_loaded(
    client: httpx.AsyncClient, hub: Any, checkmap_dir: Path
) -> None:
    from gateway.ci.checkmaps.validate import MAX_FILE_BYTES

    await make_project(hub, "acme")
    entry_id = await learn_direct(hub, "acme", "Check maps are short.")
    padding = "# " + "x" * 100 + "\n"
    text = checkmap("acme", github_binding("https://token.actions.githubusercontent.com"), {"unit": [entry_id]})
    text += padding * (MAX_FILE_BYTES // len(padding) + 1)
    await write_map(hub, checkmap_dir, "acme.yaml", text)
    ready = (await client.get("/readyz")).json()
    [status] = ready["checkmaps"]
    assert status["file"].endswith("acme.yaml") and status["error"]
    assert "KiB" in status["error"]


def small_map(project: str, *, issuers: int = 1, checks: int = 1, supports: int = 1) -> str:
    """A valid check map of the given size: webhook bindings, checks in flow
    style one a line, the first check's ids one a line (so each has its line)."""
    lines = [f"project: {project}", "issuers:"]
    for n in range(issuers):
        lines += ["  - provider: webhook", f"    source: canary-{n}", f"    secret_env: CANARY_{project.replace('-', '_')}_{n}_SECRET"]
    lines += ["checks:", "  check-0:", "    supports:"] + [f"      - kn_{n:026d}" for n in range(supports)]
    lines += [f"  check-{n}: {{supports: [kn_{0:026d}]}}" for n in range(1, checks)]
    return "\n".join(lines) + "\n"


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_caps_inside_one_check_map_are_problems_at_their_line(tmp_path: Path) -> None:
    from gateway.ci.checkmaps.registry import CheckmapRegistry
    from gateway.ci.checkmaps.validate import MAX_BINDINGS, MAX_CHECKS, MAX_SUPPORTS, validate_text
    from gateway.core.clock import ManualClock

    at_the_caps = small_map("acme", issuers=MAX_BINDINGS, checks=MAX_CHECKS, supports=MAX_SUPPORTS)
    checkmap, problems = validate_text(at_the_caps, "acme.yaml")
    assert problems == [] and checkmap is not None
    assert (len(checkmap.bindings), len(checkmap.checks), len(checkmap.checks["check-0"].supports)) == (
        MAX_BINDINGS, MAX_CHECKS, MAX_SUPPORTS)

    text = small_map("acme", issuers=MAX_BINDINGS + 1)
    assert validate_text(text, "acme.yaml") == (None, [
        Problem("acme.yaml", line_of(text, f"source: canary-{MAX_BINDINGS}") - 1,
                f"issuers lists {MAX_BINDINGS + 1} bindings; a check map holds at most {MAX_BINDINGS} "
                f"(this is binding {MAX_BINDINGS + 1})")])
    text = small_map("acme", checks=MAX_CHECKS + 3)
    assert validate_text(text, "acme.yaml") == (None, [
        Problem("acme.yaml", line_of(text, f"check-{MAX_CHECKS}:"),
                f"checks maps {MAX_CHECKS + 3} checks; a check map holds at most {MAX_CHECKS} "
                f"(this is check {MAX_CHECKS + 1})")])
    text = small_map("acme", supports=MAX_SUPPORTS + 1)
    assert validate_text(text, "acme.yaml") == (None, [
        Problem("acme.yaml", line_of(text, f"- kn_{MAX_SUPPORTS:026d}"),
                f"check-0: supports lists {MAX_SUPPORTS + 1} entry ids; a check supports at most {MAX_SUPPORTS} "
                f"(this is id {MAX_SUPPORTS + 1})")])

    # In the registry, a file over a cap is like any broken file: reported,
    # and its last good version stays in force.
    (tmp_path / "acme.yaml").write_text(small_map("acme", supports=2))
    registry = CheckmapRegistry(tmp_path, ManualClock(start=1_800_000_000))
    registry.reload()
    (tmp_path / "acme.yaml").write_text(text)
    assert registry.reload() is True
    [row] = registry.status()
    assert "a check supports at most" in row["error"] and row["sha256"] is not None
    assert registry.snapshot.rule("acme", "check-0").supports == (f"kn_{0:026d}", f"kn_{1:026d}")

    # The editors' schema says the same.
    schema = json.loads((REPO / "checkmaps" / "checkmap.schema.json").read_text())
    assert schema["properties"]["issuers"]["maxItems"] == MAX_BINDINGS
    assert schema["properties"]["checks"]["maxProperties"] == MAX_CHECKS
    assert schema["$defs"]["check"]["properties"]["supports"]["maxItems"] == MAX_SUPPORTS


def test_files_past_the_folder_cap_are_reported_and_not_loaded(tmp_path: Path) -> None:
    from gateway.ci.checkmaps.registry import MAX_REPORTED_SKIPS, CheckmapRegistry
    from gateway.core.clock import ManualClock

    for slug in ("delta", "alpha", "echo", "charlie", "bravo"):
        (tmp_path / f"{slug}.yaml").write_text(small_map(slug))
    registry = CheckmapRegistry(tmp_path, ManualClock(start=1_800_000_000), max_files=3)
    assert registry.reload() is True
    assert sorted(registry.snapshot.maps) == ["alpha", "bravo", "charlie"]  # the first three by name
    message = ("not loaded: over the cap of 3 check map files in one folder (5 found; the first 3 by name are "
               "loaded); remove the maps of projects this gateway does not serve")
    assert [str(p) for p in registry.problems()] == [f"{tmp_path / name}:1: {message}" for name in ("delta.yaml", "echo.yaml")]
    rows = {Path(row["file"]).name: row for row in registry.status()}
    assert rows["delta.yaml"]["error"] == f"{tmp_path / 'delta.yaml'}:1: {message}" and rows["delta.yaml"]["sha256"] is None
    assert rows["charlie.yaml"]["error"] is None and rows["charlie.yaml"]["sha256"]
    assert registry.reload() is False  # nothing changed, nothing re-reported

    # A file that sorts first pushes the last loaded one past the cap: its bindings leave force.
    (tmp_path / "aaron.yaml").write_text(small_map("aaron"))
    assert registry.reload() is True
    assert sorted(registry.snapshot.maps) == ["aaron", "alpha", "bravo"]
    assert [Path(p.file).name for p in registry.problems()] == ["charlie.yaml", "delta.yaml", "echo.yaml"]
    # Back under the cap: every file is loaded and nothing is reported.
    for name in ("aaron.yaml", "delta.yaml", "echo.yaml"):
        (tmp_path / name).unlink()
    assert registry.reload() is True
    assert sorted(registry.snapshot.maps) == ["alpha", "bravo", "charlie"] and registry.problems() == []

    # Far past the cap the report stays bounded: the last file named counts the rest.
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for n in range(1 + MAX_REPORTED_SKIPS + 5):
        (crowded / f"p{n:04d}.yaml").write_text(small_map(f"p{n:04d}"))
    registry = CheckmapRegistry(crowded, ManualClock(start=1_800_000_000), max_files=1)
    registry.reload()
    problems = registry.problems()
    assert len(problems) == MAX_REPORTED_SKIPS == len(registry.status()) - 1
    assert problems[-1].message.endswith("; nor are the 5 files after this one by name")


def test_the_file_cap_through_the_cli_exits_1(tmp_path: Path) -> None:
    """The real cap, the way a maintainer meets it: `relayroom checkmap check`."""
    import subprocess
    import sys

    from gateway.ci.checkmaps.registry import MAX_FILES

    for n in range(MAX_FILES + 2):
        (tmp_path / f"p{n:04d}.yaml").write_text(f"project: p{n:04d}\nissuers:\n  - provider: webhook\n"
                                                  f"    source: canary\n    secret_env: CANARY_{n}_SECRET\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    result = subprocess.run([sys.executable, "-m", "gateway", "checkmap", "check", str(tmp_path)], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":1: ")[0] for line in lines] == [str(tmp_path / f"p{n:04d}.yaml") for n in (MAX_FILES, MAX_FILES + 1)]
    assert all(f"over the cap of {MAX_FILES} check map files" in line for line in lines)
    assert result.stderr.strip().splitlines()[-1].startswith("relayroom: 2 problem(s)")


async def test_a_folder_over_the_cap_shows_on_readyz(client: httpx.AsyncClient, hub: Any, checkmap_dir: Path) -> None:
    registry = hub.checkmaps
    registry.max_files = 1  # the cap is what is tested, not its value
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    (checkmap_dir / "acme.yaml").write_text(small_map("acme"))
    await write_map(hub, checkmap_dir, "beta.yaml", small_map("beta"))
    ready = (await client.get("/readyz")).json()
    rows = {Path(row["file"]).name: row for row in ready["checkmaps"]}
    assert rows["acme.yaml"]["error"] is None and rows["acme.yaml"]["sha256"]
    assert "not loaded: over the cap of 1 check map files" in rows["beta.yaml"]["error"]
    assert registry.snapshot.maps.keys() == {"acme"}


# -- a burst of CI runs ------------------------------------------------------------------------------


async def test_a_burst_of_ci_runs_on_a_cold_key_cache_is_served(
    live_server: LiveServer, checkmap_dir: Path, issuer: OidcIssuer
) -> None:
    """After a start (or a restart after a crash) the key cache is empty and
    the CI jobs that were waiting arrive together: every one is verified
    with the one JWKS fetch, none is told to come back in a minute.  A real
    server and the real clock: the fetch takes time, as it does in production."""

    async def prepare(hub: Any) -> None:
        await make_project(hub, "acme")
        entry_id = await learn_direct(hub, "acme", "Cold starts serve bursts.")
        await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url), {"unit": [entry_id]}))

    live_setup(live_server, prepare)
    now = time.time()
    tokens = [issuer.github_token(now) for _ in range(16)]
    async with httpx.AsyncClient(base_url=live_server.url, timeout=10) as client:
        answers = await asyncio.gather(
            *[client.post("/v1/attestations", json={"check": "unit", "outcome": "success"}, headers=bearer(t)) for t in tokens]
        )
    assert [r.status_code for r in answers] == [201] * 16, [r.json()["error"]["code"] for r in answers if r.status_code != 201]
    assert issuer.hits.get("/.well-known/jwks", 0) == 1
