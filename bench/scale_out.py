"""Attestations per second through one, then two `relayroom serve` processes
on one store: what a second gateway process adds.

    .venv/bin/python bench/scale_out.py [--requests 2000] [--clients 32] [--servers 1 2] [--rounds 3]
    RELAYROOM_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/scale_out.py

The workload is bench/attest.py's (a real OIDC issuer on 127.0.0.1, one
GitHub-shaped RS256 token per request, 50 checks each supporting an entry of
their own), spread evenly over the processes, each on its own port and at
the shipped defaults (bench/outside.py), each driven by a wrk of its own: the
same number of requests and client connections whatever the process count.  For
each count it prints req/s, p50/p99 and the store's totals afterwards (every
attestation recorded once).  The baseline is the single process of the same
run.  On a machine with fewer cores than processes + PostgreSQL + the load
generator, a second process cannot add much: read the ratio with `nproc`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
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

from bench.attest import attestation_lines, mint, prepare  # noqa: E402
from bench.outside import Server, idle_share, load_average, machine_ticks, spread, wrk_run  # noqa: E402
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
    """`count` servers at the shipped defaults on one store, one wrk per server
    (the connections split between them), `--rounds` rounds; the rate of a
    round is all its attestations over the slower wrk's time."""
    from concurrent.futures import ThreadPoolExecutor

    folder = work / f"checkmaps-{count}"
    folder.mkdir()
    with bench_database(work, f"scale{count}") as db_url:
        asyncio.run(prepare(db_url, folder, issuer.url))
        tokens = mint(issuer, args.requests * args.rounds + count)
        env = {"RELAYROOM_DATABASE_URL": db_url, "RELAYROOM_CHECKMAPS": str(folder),
               "RELAYROOM_ALLOW_INSECURE_ISSUERS": "1"}
        with contextlib.ExitStack() as stack:
            servers = [stack.enter_context(Server(env, work)) for _ in range(count)]
            for n, server in enumerate(servers):  # each process makes its one JWKS fetch here
                wrk_run(server.port, attestation_lines([tokens[-1 - n]]) * 2, 1)
            rounds = []
            for r in range(args.rounds):
                lines = attestation_lines(tokens[r * args.requests:(r + 1) * args.requests])
                shares = [lines[i::count] for i in range(count)]
                ticks = machine_ticks()
                with ThreadPoolExecutor(count) as pool:
                    parts = list(pool.map(lambda pair: wrk_run(pair[0].port, pair[1], max(1, args.clients // count),
                                                               server_pid=pair[0].pid), zip(servers, shares)))
                idle = idle_share(ticks, machine_ticks())
                done = sum(p["requests"] for p in parts)
                seconds = max(p["requests"] / p["per_second"] for p in parts)
                statuses: dict[int, int] = {}
                for part in parts:
                    for code, n in part["statuses"].items():
                        statuses[code] = statuses.get(code, 0) + n
                row = {"per_second": done / seconds, "p50_ms": statistics.median(p["p50_ms"] for p in parts),
                       "p99_ms": max(p["p99_ms"] for p in parts), "statuses": statuses, "requests": done,
                       "idle": idle}
                print(f"{count} process(es), round {r + 1}: {row['per_second']:.0f} attestations/s, p50 "
                      f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, machine idle {100 * idle:.0f}%, "
                      f"statuses {statuses}; load {load_average()}", flush=True)
                rounds.append(row)
        store = asyncio.run(totals(db_url))
        print(f"{'':<22} store afterwards: {store}")
    return {"rounds": rounds, "store": store, "sent": sum(r["requests"] for r in rounds) + count}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from tests.support.oidc_issuer import OidcIssuer

    print(f"store: {backend()}; {os.cpu_count()} CPUs", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="relayroom-scale-") as folder, OidcIssuer() as issuer:
        for count in args.servers:
            rows.append(run(count, args, issuer, Path(folder)))
    base = statistics.median(r["per_second"] for r in rows[0]["rounds"])
    print(f"| store | gateway processes | attestations/s, median (min-max) of {args.rounds} | x {args.servers[0]} "
          "process | p50 ms | p99 ms | machine idle % |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for count, row in zip(args.servers, rows):
        rates = [r["per_second"] for r in row["rounds"]]
        print(f"| {backend()} | {count} | {spread(rates, '{:.0f}')} | {statistics.median(rates) / base:.2f} | "
              f"{spread([r['p50_ms'] for r in row['rounds']], '{:.1f}')} | "
              f"{spread([r['p99_ms'] for r in row['rounds']], '{:.1f}')} | "
              f"{spread([100 * r['idle'] for r in row['rounds']], '{:.0f}')} |")
    # Each token's attestation is recorded once (one row per jti), every 201
    # has its row, and no row is there that was not sent (wrk stops reading
    # after its share, so a few last requests in flight are stored unread).
    ok = all(set(x["statuses"]) <= {201} for r in rows for x in r["rounds"]) and all(
        r["store"]["attestations"] == r["store"]["seen_tokens"]
        and sum(x["statuses"].get(201, 0) for x in r["rounds"]) <= r["store"]["attestations"]
        <= args.requests * args.rounds + c for r, c in zip(rows, args.servers))
    print(f"each attestation recorded once: {ok}; load average {load_average()}")
    if args.json:
        print(json.dumps(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
