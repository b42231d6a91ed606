"""What an agent's MCP client pays over REST for one recall, measured from outside.

    .venv/bin/python bench/mcp_overhead.py [--runs 3] [--calls 400] [--entries 300]

One project of 300 trusted entries (learned and confirmed through the hub, as
an owner would), on a SQLite file.  Each run starts its own `relayroom serve`
process at the shipped defaults (log level info, access log on, its log
written to a file), waits for `/healthz`, then this process (the client)
makes sequential recalls through three doors taking turns call by call, so
whatever else the machine is doing weighs on all of them alike:

- REST: `GET /v1/projects/bench/recall?q=...` (httpx, one keep-alive connection);
- MCP SDK: `Client.call_tool("recall", ...)` of the official `mcp` SDK
  (httpx2, one keep-alive connection, the protocol era the client picks);
- MCP raw: the same request the SDK sends (protocol 2026-07-28: one
  self-contained JSON-RPC `tools/call` POST to /mcp), written by hand and
  sent with httpx: the server side of MCP alone, without the SDK client's
  own work (building, parsing and validating messages);
- MCP raw legacy: the same call as a 2025-11-25 client sends it to a
  stateless server (no protocol header, no session): the SDK builds a
  transport, a dispatcher and a task for each such request, which the
  2026-07-28 path does not: the difference is what keeping those server
  objects across requests could save.

Questions are agent-style sentences built from the entries' vocabulary, so
most recalls find something.  Every call is a real recall (searched and
recorded).  Per run: the median and p90 of each door in ms and each MCP
median over REST's; over the runs: the median ratio and its spread (min-max).
The goal (issue 13): the SDK's median at most 1.5x REST's.
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

from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.knowledge.model import Principal  # noqa: E402
from recall_latency import Text  # noqa: E402

DOORS = ("REST", "MCP SDK call_tool", "MCP raw JSON-RPC", "MCP raw legacy")
MODERN = "2026-07-28"  # the protocol era the SDK client lands on against this server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def prepare(database_url: str, entries: int, text: Text, runs: int) -> list[str]:
    hub = Hub(Config.from_env({}, database_url=database_url, sweep_interval=0.0))
    await hub.start(background=False)
    try:
        project = await hub.accounts.create_project("bench")
        owner = Principal(project=project, name="olivia", level="owner")
        for _ in range(entries):
            entry, _ = await hub.knowledge.learn(owner, "convention", text.statement(), text.evidence())
            await hub.knowledge.confirm(owner, entry.id)
        # One agent per run: the recall budget (3,600 an hour at the defaults)
        # is per principal, and one run makes 4 x (calls + warm-up) recalls.
        return [await hub.accounts.create_token("bench", "read", f"bench-agent-{run}") for run in range(runs)]
    finally:
        await hub.stop()


async def measure(url: str, token: str, questions: list[str], calls: int, warmup: int) -> dict[str, list[float]]:
    auth = {"Authorization": f"Bearer {token}"}
    mcp_headers = {**auth, "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                   "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "recall"}
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    sdk_http = httpx2.AsyncClient(headers=auth, timeout=30)
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=30) as http, sdk_http, Client(
        streamable_http_client(f"{url}/mcp", http_client=sdk_http)
    ) as client:

        async def rest(i: int) -> None:
            r = await http.get("/v1/projects/bench/recall", params={"q": questions[i % len(questions)]})
            r.raise_for_status()

        async def sdk(i: int) -> None:
            result = await client.call_tool("recall", {"query": questions[i % len(questions)]})
            assert not result.is_error, result.content

        async def raw(i: int) -> None:
            body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "recall", "arguments": {"query": questions[i % len(questions)]}, "_meta": meta}}
            r = await http.post("/mcp", json=body, headers=mcp_headers)
            r.raise_for_status()
            assert "error" not in r.json(), r.text

        legacy_headers = {k: v for k, v in mcp_headers.items() if not k.startswith(("MCP-", "Mcp-"))}

        async def legacy(i: int) -> None:
            body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "recall", "arguments": {"query": questions[i % len(questions)]}}}
            r = await http.post("/mcp", json=body, headers=legacy_headers)
            r.raise_for_status()
            assert "error" not in r.json(), r.text

        doors: dict[str, Callable[[int], Awaitable[Any]]] = dict(zip(DOORS, (rest, sdk, raw, legacy)))
        samples: dict[str, list[float]] = {name: [] for name in doors}
        for i in range(warmup + calls):
            for name, call in doors.items():
                started = time.perf_counter()
                await call(i)
                if i >= warmup:
                    samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def serve(database_url: str, folder: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    # The shipped defaults: nothing set but where the store and the maps are.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env.update(RELAYROOM_DATABASE_URL=database_url, RELAYROOM_CHECKMAPS=folder)
    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            stop(server)
            raise SystemExit(f"the gateway did not start; see {log}")
        time.sleep(0.1)


def stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(5)


def p90(samples: list[float]) -> float:
    return sorted(samples)[int(0.9 * (len(samples) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--entries", type=int, default=300)
    args = parser.parse_args(argv)
    if 4 * (args.calls + args.warmup) > 3600:
        parser.error("at most 850 calls and warm-up per run: one agent's recall budget is 3,600 an hour")
    text = Text()
    ratios: dict[str, list[float]] = {door: [] for door in DOORS[1:]}
    with tempfile.TemporaryDirectory() as folder:
        database_url = f"sqlite:///{folder}/bench.db"
        tokens = asyncio.run(prepare(database_url, args.entries, text, args.runs))
        questions = [text.question() for _ in range(200)]
        print(f"{args.calls} sequential recalls per door per run, {args.entries} trusted entries, "
              f"a fresh `relayroom serve` per run at the defaults\n")
        print("| run | door | median ms | p90 ms | median / REST |")
        print("|---|---|---:|---:|---:|")
        for run in range(1, args.runs + 1):
            server, url = serve(database_url, folder, Path(folder) / "server.log")
            try:
                samples = asyncio.run(measure(url, tokens[run - 1], questions, args.calls, args.warmup))
            finally:
                stop(server)
            rest = statistics.median(samples["REST"])
            for door in DOORS:
                median = statistics.median(samples[door])
                if door in ratios:
                    ratios[door].append(median / rest)
                print(f"| {run} | {door} | {median:.2f} | {p90(samples[door]):.2f} | {median / rest:.2f}x |", flush=True)
    print()
    for door, values in ratios.items():
        print(f"{door} / REST over {args.runs} runs: median {statistics.median(values):.2f}x, "
              f"spread {min(values):.2f}x-{max(values):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
