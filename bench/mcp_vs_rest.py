"""A recall through /mcp and through REST, in the same run, against one
`relayroom serve` process on 127.0.0.1 (SQLite, 1,000 trusted entries).

    .venv/bin/python bench/mcp_vs_rest.py [--calls 500]

Three clients, each with one keep-alive connection, sequential calls after a
warm-up:

- REST: `GET /v1/projects/{p}/recall?q=...` with httpx;
- MCP raw: one JSON-RPC `tools/call` POST to /mcp (no SDK on the client):
  what the server side of MCP costs over REST;
- MCP SDK: `Client.call_tool("recall", ...)` of the official SDK (httpx2),
  what an agent's MCP client pays in all.

Every call is a real recall (searched and recorded).  Figures: median and
p90 in milliseconds, and each MCP median as a ratio of REST's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recall_latency import Text, add_trusted  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402

QUESTIONS = [
    "how do I name a migration?", "any gotchas with the connection pooler?", "which formatter do we use",
    "why did we choose this date library", "where do plugin packages go", "what port does the dev server use",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def prepare(database_url: str, entries: int) -> str:
    hub = Hub(Config.from_env({}, database_url=database_url, sweep_interval=0.0))
    await hub.start(background=False)
    try:
        project = await hub.accounts.create_project("bench")
        await add_trusted(hub, project.id, entries, Text(), hub.clock.now())
        return await hub.accounts.create_token("bench", "read", "bench-agent")
    finally:
        await hub.stop()


async def run(url: str, token: str, calls: int, warmup: int) -> dict[str, list[float]]:
    """The three doors take turns call by call, so that whatever else the
    machine is doing weighs on all of them alike."""
    auth = {"Authorization": f"Bearer {token}"}
    mcp_headers = {**auth, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    http = httpx2.AsyncClient(headers=auth, timeout=30)
    async with httpx.AsyncClient(base_url=url, headers=auth) as rest, http, Client(
        streamable_http_client(f"{url}/mcp", http_client=http)
    ) as client:

        async def rest_call(i: int) -> None:
            r = await rest.get("/v1/projects/bench/recall", params={"q": QUESTIONS[i % len(QUESTIONS)]})
            r.raise_for_status()

        async def raw_call(i: int) -> None:
            body = {
                "jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": "recall", "arguments": {"query": QUESTIONS[i % len(QUESTIONS)]}},
            }
            r = await rest.post("/mcp", json=body, headers=mcp_headers)
            r.raise_for_status()
            assert "error" not in r.json(), r.text

        async def sdk_call(i: int) -> None:
            result = await client.call_tool("recall", {"query": QUESTIONS[i % len(QUESTIONS)]})
            assert not result.is_error

        doors: dict[str, Callable[[int], Awaitable[Any]]] = {
            "REST": rest_call, "MCP raw JSON-RPC": raw_call, "MCP SDK call_tool": sdk_call,
        }
        samples: dict[str, list[float]] = {name: [] for name in doors}
        for i in range(warmup + calls):
            for name, call in doors.items():
                started = time.perf_counter()
                await call(i)
                if i >= warmup:
                    samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--entries", type=int, default=1000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        database_url = f"sqlite:///{folder}/bench.db"
        token = asyncio.run(prepare(database_url, args.entries))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
        env.update(RELAYROOM_DATABASE_URL=database_url, RELAYROOM_LOG_LEVEL="warning", RELAYROOM_SWEEP_INTERVAL="0",
                   RELAYROOM_CHECKMAPS=folder)
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the gateway did not start")
                time.sleep(0.1)
            results = asyncio.run(run(url, token, args.calls, args.warmup))
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
    rest = statistics.median(results["REST"])
    print(f"{args.calls} sequential recalls each, {args.entries} trusted entries, one keep-alive connection per client\n")
    print("| door | median ms | p90 ms | median / REST |")
    print("|---|---:|---:|---:|")
    for name, samples in results.items():
        median = statistics.median(samples)
        p90 = sorted(samples)[int(0.9 * (len(samples) - 1))]
        print(f"| {name} | {median:.2f} | {p90:.2f} | {median / rest:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
