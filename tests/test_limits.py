"""Limits that hold under abuse, through the real network path where the
network path is what is under test.

- Request heads: an Authorization header over 16 KiB, all headers over 64 KiB,
  a head over 128 KiB, a head that never finishes: each answered in the
  contract's error body by a real `relayroom serve` (uvicorn with httptools),
  and an endless header does not grow the server's memory.
- Bodies: over 64 KiB, declared or streamed: 413 before the body is read.
- OIDC issuers: a discovery or JWKS fetch that hangs, or answers megabytes,
  costs at most the fetch timeout and the size cap, and the CI job is told
  to retry (503 `jwks_unavailable` with Retry-After).
- Check map files: one over the size cap is reported and not loaded.

Query length, page size and the per-principal learn and event budgets are
held in tests/test_bad_input.py and tests/test_entries_api.py.
"""

from __future__ import annotations

import asyncio
import json
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

from gateway.clock import SystemClock
from gateway.config import Config
from gateway.hub import Hub
from gateway.web.http_limits import MAX_HEAD_BYTES, BoundedHttpToolsProtocol
from tests.attest_fixtures import checkmap, github_binding, learn as learn_direct, write_map
from tests.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.conftest import LiveServer, free_port, live_setup, make_project
from tests.helpers import bearer
from tests.oidc_issuer import OidcIssuer
from tests.test_crash import REPO, ServeProcess


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


def test_a_head_that_never_finishes_is_timed_out(tmp_path: Path) -> None:
    async def hello(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(hello, host="127.0.0.1", port=port, http=ShortHeadTimeout,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        assert_error_body(exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "), 408, "request_timeout")
        assert_error_body(exchange(port, b""), 408, "request_timeout")  # connected, said nothing
        assert time.monotonic() - started < 5
        # A complete request on the same kind of connection is served as usual.
        assert exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200 ")
    finally:
        server.should_exit = True
        thread.join(10)


# -- bodies ---------------------------------------------------------------------------------------


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
    keys = hub.extensions["oidc"].keys
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
            assert slow.sent < 4 * 1024 * 1024, f"the gateway read {slow.sent >> 20} MiB of a key set"
    rows = await hub.driver.read(lambda q: q.count_rows("attestations"))
    assert rows == 0


# -- check map files ----------------------------------------------------------------------------------


async def test_a_check_map_over_the_size_cap_is_reported_and_not_loaded(
    client: httpx.AsyncClient, hub: Any, checkmap_dir: Path
) -> None:
    from gateway.checkmaps.validate import MAX_FILE_BYTES

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
