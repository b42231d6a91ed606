"""Attestations per second through one, then two `relayroom serve` processes
on one store: what a second gateway process adds.

    .venv/bin/python bench/scale_out.py [--requests 2000] [--clients 32] [--servers 1 2]
    RELAYROOM_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/scale_out.py

The workload is bench/attest.py's (a real OIDC issuer on 127.0.0.1, one
GitHub-shaped RS256 token per request, 50 checks each supporting an entry of
their own), spread evenly over the processes, each on its own port: the same
number of requests and client connections whatever the process count.  For
each count it prints req/s, p50/p99 and the store's totals afterwards (every
attestation recorded once).  The baseline is the single process of the same
run.  On a machine with fewer cores than processes + PostgreSQL + the load
generator, a second process cannot add much: read the ratio with `nproc`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.attest import CHECKS, drive, free_port, prepare, request_bytes, summary, wait_ready  # noqa: E402
from bench.stores import backend, bench_database  # noqa: E402


async def drive_all(ports: list[int], requests: list[list[bytes]], clients: int) -> tuple[float, list[float], dict[int, int]]:
    started = time.perf_counter()
    parts = await asyncio.gather(*(drive(port, reqs, max(1, clients // len(ports))) for port, reqs in zip(ports, requests)))
    elapsed = time.perf_counter() - started
    latencies = [x for _, lat, _ in parts for x in lat]
    statuses: dict[int, int] = {}
    for _, _, st in parts:
        for code, n in st.items():
            statuses[code] = statuses.get(code, 0) + n
    return elapsed, latencies, statuses


async def totals(db_url: str) -> dict[str, int]:
    from gateway.core.config import Config
    from gateway.hub import Hub

    hub = Hub(Config.from_env({}, database_url=db_url, sweep_interval=0.0))
    await hub.start(background=False)
    try:
        return await hub.driver.read(
            lambda q: _count(q, ("attestations", "seen_tokens", "supports")),
        )
    finally:
        await hub.stop()


async def _count(q: Any, tables: tuple[str, ...]) -> dict[str, int]:
    return {t: await q.count_rows(t) for t in tables}


def run(count: int, args: argparse.Namespace, issuer: Any, work: Path) -> dict[str, Any]:
    folder = work / f"checkmaps-{count}"
    folder.mkdir()
    with bench_database(work, f"scale{count}") as db_url:
        asyncio.run(prepare(db_url, folder, issuer.url))
        now = time.time()
        tokens = [issuer.github_token(now, key=issuer.key("RS256")) for _ in range(args.requests + count)]
        ports = [free_port() for _ in range(count)]
        env = dict(os.environ, RELAYROOM_DATABASE_URL=db_url, RELAYROOM_CHECKMAPS=str(folder),
                   RELAYROOM_ALLOW_INSECURE_ISSUERS="1", RELAYROOM_LOG_LEVEL="warning", RELAYROOM_SWEEP_INTERVAL="0")
        servers = [subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(p)], env=env, cwd=work) for p in ports]
        try:
            for port, server in zip(ports, servers):
                wait_ready(port, server)
            bodies = [json.dumps({"check": f"check-{i % CHECKS}", "outcome": "success"}).encode() for i in range(len(tokens))]
            for n, port in enumerate(ports):  # each process makes its one JWKS fetch here
                asyncio.run(drive(port, [request_bytes("POST", "/v1/attestations", port, bodies[-1 - n], tokens[-1 - n])], 1))
            split: list[list[bytes]] = [[] for _ in ports]
            for i in range(args.requests):
                port = ports[i % count]
                split[i % count].append(request_bytes("POST", "/v1/attestations", port, bodies[i], tokens[i]))
            row = summary(f"{count} process(es)", *asyncio.run(drive_all(ports, split, args.clients)))
        finally:
            for server in servers:
                server.send_signal(signal.SIGINT)
            for server in servers:
                server.wait(30)
        row["store"] = asyncio.run(totals(db_url))
        print(f"{'':<22} store afterwards: {row['store']}")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from tests.support.oidc_issuer import OidcIssuer

    print(f"store: {backend()}; {os.cpu_count()} CPUs", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="relayroom-scale-") as folder, OidcIssuer() as issuer:
        for count in args.servers:
            rows.append(run(count, args, issuer, Path(folder)))
    base = rows[0]["per_second"]
    print(f"| store | gateway processes | attestations/s | x {args.servers[0]} process | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for count, row in zip(args.servers, rows):
        print(f"| {backend()} | {count} | {row['per_second']:.0f} | {row['per_second'] / base:.2f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} |")
    ok = all(set(r["statuses"]) == {201} and r["store"]["attestations"] == args.requests + c for r, c in zip(rows, args.servers))
    if args.json:
        print(json.dumps(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
