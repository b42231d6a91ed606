"""Recalls per second through a running gateway, as a ratio to the
hello-world route of the same server in the same run.

    .venv/bin/python bench/recall_http.py [--entries 10000] [--requests 3000] [--clients 64] [--rounds 3]

It creates a project holding N trusted entries (written straight into the
store with their recall index rows, as `bench/memory.py` does: SQLite, the
embedded default), starts `relayroom serve` (one uvicorn worker, loopback),
and drives `GET /bench/hello` and `GET /v1/projects/bench/recall?q=...` in
turn with the same bounded load (N requests over C keep-alive connections,
a read token), for --rounds rounds.  Each recall is the whole REST path:
token check, the search, the entries, and the recall record (written without
waiting for an fsync, as recalls are telemetry).  The questions are 3 to 6
words drawn from the entries' own vocabulary (Zipf-like), so each matches a
realistic share of the project.

It prints both routes per round (req/s, p50, p99, server CPU per request)
and the median of the per-round ratios.  The issue asks for the figure, not
a target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.attest import free_port, measured, request_bytes, wait_ready  # noqa: E402
from bench.memory import VOCABULARY, WEIGHTS, create_store, load_entries  # noqa: E402

WARM = 500


def questions(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCABULARY, cum_weights=WEIGHTS, k=rng.randint(3, 6))) for _ in range(count)]


def recall_request(port: int, question: str, token: str) -> bytes:
    return request_bytes("GET", f"/v1/projects/bench/recall?q={quote(question)}", port, token=token)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="relayroom-bench-"))
    db_url = f"sqlite:///{work / 'bench.sqlite'}"
    tokens = asyncio.run(create_store(db_url))
    seconds = asyncio.run(load_entries(db_url, args.entries))
    print(f"loaded {args.entries} trusted entries in {seconds:.1f} s", file=sys.stderr)
    port = free_port()
    env = dict(os.environ, RELAYROOM_DATABASE_URL=db_url, RELAYROOM_LOG_LEVEL="warning", RELAYROOM_PORT=str(port),
               RELAYROOM_SWEEP_INTERVAL="0", RELAYROOM_CHECKMAPS=str(work / "checkmaps"))
    server = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], env=env, cwd=work)
    rounds = []
    try:
        wait_ready(port, server)
        asked = questions(args.requests * args.rounds + WARM)
        from bench.attest import drive

        asyncio.run(drive(port, [recall_request(port, q, tokens["read"]) for q in asked[:WARM]], args.clients))
        asyncio.run(drive(port, [request_bytes("GET", "/bench/hello", port)] * WARM, args.clients))
        for r in range(args.rounds):
            print(f"-- round {r + 1} of {args.rounds}", file=sys.stderr)
            hello = measured("GET /bench/hello", server.pid, port,
                             [request_bytes("GET", "/bench/hello", port)] * args.requests, args.clients)
            first = WARM + r * args.requests
            recall = measured("GET .../recall", server.pid, port,
                              [recall_request(port, q, tokens["read"]) for q in asked[first:first + args.requests]],
                              args.clients)
            rounds.append((hello, recall))
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)
    ratios = [rc["per_second"] / h["per_second"] for h, rc in rounds]
    cpu_ratios = [h["server_cpu_us"] / rc["server_cpu_us"] for h, rc in rounds]
    statuses = {s for _, rc in rounds for s in rc["statuses"]}
    print(f"ratio recalls / hello-world per round: {', '.join(f'{x:.3f}' for x in ratios)}")
    print(f"ratio recalls / hello-world (median of {len(ratios)} rounds), {args.entries} trusted entries: "
          f"{statistics.median(ratios):.3f}; in server CPU time: {statistics.median(cpu_ratios):.3f}; "
          f"recall p50 / p99 (median): {statistics.median(rc['p50_ms'] for _, rc in rounds):.1f} / "
          f"{statistics.median(rc['p99_ms'] for _, rc in rounds):.1f} ms; statuses {sorted(statuses)}")
    if args.json:
        print(json.dumps({"rounds": [{"hello": h, "recall": rc} for h, rc in rounds],
                          "ratio": statistics.median(ratios), "cpu_ratio": statistics.median(cpu_ratios)}))
    return 0 if statuses == {200} else 1


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"took {time.perf_counter() - started:.0f} s", file=sys.stderr)
    sys.exit(code)
