"""Two gateway processes, no shared memory, one MCP client.

Two `relayroom serve` processes on one SQLite file (and on one PostgreSQL
database when a server is provided).  The MCP client's transport sends each
HTTP request to the next process in turn, so one client session is served by
both: what one process learned, the other recalls; a recall made on one is
reported as used on the other.  That only works because the MCP endpoint is
stateless and everything lives in the store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import free_port
from tests.support.helpers import wait_healthy


def _env(database_url: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env.update(
        RELAYROOM_DATABASE_URL=database_url,
        RELAYROOM_CHECKMAPS=str(tmp_path / "checkmaps"),
        RELAYROOM_SWEEP_INTERVAL="0",
        RELAYROOM_LOG_LEVEL="warning",
    )
    return env


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gateway", *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def two_gateways(database_url: str, tmp_path: Path) -> Iterator[tuple[list[str], dict[str, str]]]:
    env = _env(database_url, tmp_path)
    (tmp_path / "checkmaps").mkdir(exist_ok=True)
    _cli(env, "project", "create", "acme")
    tokens = {
        level: _cli(env, "token", "create", "--project", "acme", "--level", level, "--name", name).strip().splitlines()[-1]
        for level, name in (("write", "agent-7"), ("owner", "olivia"))
    }
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for _ in range(2):
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        for url, proc in zip(urls, procs):
            wait_healthy(url, proc, deadline)
        yield urls, tokens
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


class RoundRobin(httpx2.AsyncBaseTransport):
    """Each request goes to the next gateway process, whatever URL it names."""

    def __init__(self, urls: list[str]) -> None:
        self.ports = [int(u.rsplit(":", 1)[1]) for u in urls]
        self.inner = httpx2.AsyncHTTPTransport()
        self.sent = [0] * len(urls)
        self.turn = 0

    async def handle_async_request(self, request: Any) -> Any:
        index = self.turn % len(self.ports)
        self.turn += 1
        self.sent[index] += 1
        request.url = request.url.copy_with(port=self.ports[index])
        request.headers["host"] = f"127.0.0.1:{self.ports[index]}"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_two_processes_serve_one_mcp_client(two_gateways: tuple[list[str], dict[str, str]]) -> None:
    urls, tokens = two_gateways
    transport = RoundRobin(urls)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {tokens['write']}"}, transport=transport, timeout=20)
    async with http, Client(streamable_http_client(f"{urls[0]}/mcp", http_client=http)) as client:
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == {"recall", "learn", "recall_used", "report_error"}
        learned = (await client.call_tool("learn", {"kind": "convention", "statement": "Migrations are named by date."})).structured_content
        assert learned is not None and learned["state"] == "candidate"
        # the owner confirms through REST on one process ...
        async with httpx.AsyncClient(base_url=urls[1], headers={"Authorization": f"Bearer {tokens['owner']}"}) as rest:
            assert (await rest.post(f"/v1/projects/acme/entries/{learned['id']}/confirm")).status_code == 200
        # ... and the one client, spread over both processes, recalls it, uses it, reports it
        recalled = (await client.call_tool("recall", {"query": "how do I name a migration?"})).structured_content
        assert recalled is not None and [e["id"] for e in recalled["entries"]] == [learned["id"]]
        used = await client.call_tool("recall_used", {"recall_id": recalled["recall_id"], "entry_id": learned["id"]})
        assert not used.is_error, used.content
        reported = await client.call_tool("report_error", {"contradicts": learned["id"], "detail": "named by ticket now"})
        assert reported.structured_content == {"event_id": reported.structured_content["event_id"], "effect": "contradicted"}
        assert (await client.call_tool("recall", {"query": "migration name"})).structured_content["entries"] == []
    assert all(count >= 2 for count in transport.sent), transport.sent  # both processes served the session
