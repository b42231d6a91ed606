"""How `relayroom serve` treats connections: the event loop it runs on and
what that loop does with each accepted socket.

The server runs on Python's asyncio loop, not uvloop: under load uvloop took
new connections in late (docs/decisions/0006).  asyncio turns Nagle's algorithm off
only on sockets created with IPPROTO_TCP, so the listening socket must say
so, or every answer written in two parts waits for the client's delayed ACK."""

from __future__ import annotations

import asyncio
import json
import os
import select
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


# -- idle connections ---------------------------------------------------------------------------

DESCRIPTOR_LIMIT = 1024
HELD = 1100


def _limit_descriptors() -> None:
    """In the child: soft and hard limit 1024, the contract's situation
    whatever this machine's hard limit is (serve raises the soft limit to
    the hard one, so both are set)."""
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTOR_LIMIT, DESCRIPTOR_LIMIT))


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    """`relayroom serve` (SQLite) in a process that may open 1024 files, with
    a project, a trusted entry and tokens made beforehand."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env["RELAYROOM_DATABASE_URL"] = f"sqlite:///{tmp_path / 'serve.db'}"
    env["RELAYROOM_CHECKMAPS"] = str(tmp_path / "checkmaps")
    env["RELAYROOM_SEMANTIC_MODEL"] = "off"
    subprocess.run([sys.executable, "-m", "gateway", "project", "create", "acme"], env=env, check=True, capture_output=True)
    tokens = {}
    for level, name in (("owner", "olivia"), ("write", "agent-7")):
        out = subprocess.run([sys.executable, "-m", "gateway", "token", "create", "--project", "acme", "--level", level,
                              "--name", name], env=env, check=True, capture_output=True, text=True)
        tokens[level] = out.stdout.strip().splitlines()[-1]
    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=log, preexec_fn=_limit_descriptors)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, time.monotonic() + 30)
        with httpx.Client(base_url=url, timeout=10) as http:
            r = http.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": "The pooler drops idle sockets."},
                          headers={"Authorization": f"Bearer {tokens['write']}"})
            confirmed = http.post(f"/v1/projects/acme/entries/{r.json()['id']}/confirm",
                                  headers={"Authorization": f"Bearer {tokens['owner']}"})
            assert confirmed.status_code == 200
        yield url, tokens, log_path
    finally:
        stop(proc)


def test_idle_connections_beyond_the_descriptor_limit_do_not_keep_a_new_client_out(
    limited: tuple[str, dict[str, str], Path]
) -> None:
    """1,100 connections held in their request head against a process that
    may open 1,024 files: a new client's /healthz, recall and attestation
    POST are each answered within 2 s (before: none within 5 s)."""
    url, tokens, log_path = limited
    agent = {"Authorization": f"Bearer {tokens['write']}"}
    holder = subprocess.Popen([sys.executable, "-m", "tests.support.idle_holder", url.rsplit(":", 1)[1], str(HELD)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_enough_descriptors,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout is not None
        assert select.select([holder.stdout], [], [], 30)[0], "the holding client did not open its connections"
        assert holder.stdout.readline().strip() == "ready"  # all 1,100 opened at least once

        async def measure() -> dict[str, tuple[int, float]]:
            took: dict[str, tuple[int, float]] = {}
            async with httpx.AsyncClient(base_url=url, timeout=5) as http:
                for name, method, path, kwargs in (
                    ("healthz", "GET", "/healthz", {}),
                    ("recall", "GET", "/v1/projects/acme/recall", {"params": {"q": "pooler idle"}, "headers": agent}),
                    ("attestation", "POST", "/v1/attestations",
                     {"json": {"check": "ci", "outcome": "success"}, "headers": {"Authorization": "Bearer not.a.jwt"}}),
                ):
                    started = time.monotonic()
                    try:
                        status = (await http.request(method, path, **kwargs)).status_code
                    except httpx.HTTPError:
                        status = 0
                    took[name] = (status, time.monotonic() - started)
            return took

        took = asyncio.run(measure())
    finally:
        out, _ = holder.communicate(timeout=30)  # closing its stdin lets it go
    held = json.loads(out.strip().splitlines()[-1])
    print(took, held)
    assert held["opened"] >= HELD, held  # the pressure was real
    assert {name: status for name, (status, _) in took.items()} == {"healthz": 200, "recall": 200, "attestation": 401}, took
    assert all(seconds < 2.0 for _, seconds in took.values()), took
    assert "shed so far" in log_path.read_text()


def _enough_descriptors() -> None:
    """The holding client itself needs more than 1,100 descriptors."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard or hard == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
