"""How `relayroom serve` treats connections: the event loop it runs on and
what that loop does with each accepted socket.

The server runs on Python's asyncio loop, not uvloop: under load uvloop took
new connections in late (up to 1.2 s for the last of 64 clients connecting
at once; bench/README.md, "2026-12-05").  asyncio turns Nagle's algorithm off
only on sockets created with IPPROTO_TCP, so the listening socket must say
so, or every answer written in two parts waits for the client's delayed ACK."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from gateway.cli.listen import listen
from tests.conftest import free_port
from tests.support.helpers import stop, wait_healthy


async def _server_side_nodelay(sock: socket.socket) -> int:
    """TCP_NODELAY of the socket asyncio accepts on `sock`, as a server transport holds it."""
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    try:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(accepted, 5)
        finally:
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_connections_accepted_on_the_listening_socket_send_without_delay() -> None:
    assert await _server_side_nodelay(listen("127.0.0.1", 0)) == 1


async def test_a_plain_socket_would_not_have_been_enough() -> None:
    # The reason the listening socket names its protocol: asyncio leaves
    # Nagle on for a socket made with proto 0 (this test fails if a Python
    # release changes that, and the comment in listen.py with it).
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    assert await _server_side_nodelay(plain) == 0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env["RELAYROOM_DATABASE_URL"] = f"sqlite:///{tmp_path / 'serve.db'}"
    env["RELAYROOM_CHECKMAPS"] = str(tmp_path / "checkmaps")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, time.monotonic() + 30)
        yield url, proc.pid
    finally:
        stop(proc)


def test_keep_alive_answers_do_not_wait_for_a_delayed_ack(served: tuple[str, int]) -> None:
    # With Nagle on, each answer's second write waited for the client's
    # delayed ACK: 40 ms a request on Linux, against about 1 ms here.
    url, _ = served
    with httpx.Client(base_url=url, timeout=10) as http:
        http.get("/healthz")
        took = []
        for _ in range(30):
            started = time.perf_counter()
            assert http.get("/healthz").status_code == 200
            took.append(time.perf_counter() - started)
    assert statistics.median(took) < 0.020, f"median {statistics.median(took) * 1000:.1f} ms"


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's mapped files (Linux)")
def test_the_server_runs_on_asyncio_not_uvloop(served: tuple[str, int]) -> None:
    _, pid = served
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "python" in maps  # the file lists the server's libraries
    assert "uvloop" not in maps
