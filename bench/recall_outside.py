"""Recall as an agent gets it: `GET /v1/projects/target/recall?q=...` over
loopback from wrk, against `relayroom serve` at the shipped defaults (recall
fused with the installed model; `--lexical` runs it with
RELAYROOM_SEMANTIC_MODEL=off).

    .venv/bin/python bench/recall_outside.py --entries 30                         # a small project
    .venv/bin/python bench/recall_outside.py --entries 10000 --others 200000      # 10k in a hub of 200k
    .venv/bin/python bench/recall_outside.py --entries 10000 --others 1000000     # ... of 1M (minutes to build)

The store (SQLite, or PostgreSQL with RELAYROOM_DATABASE_URL: bench/stores.py)
is filled straight through its tables with bench/recall_latency.py's synthetic
text: `--others` trusted entries spread over projects of 10k, then the
project `target` with `--entries`.  The other projects' vectors are
written with them (random unit rows: their recall is not measured); the
target's are left to the server's fill job, as after an import of that
many entries at once, and the time until the last is written is printed
(until then those entries are found by the lexical stage only).  Questions are sentences of about 14
words as agents ask them ("how should I ... when ..."), their content words
drawn Zipf-like from the entries' vocabulary, some of them words with
synonyms.  Each request carries one of 64 read tokens (64 agents: a
principal's hourly recall budget is left at its default).

Per round (`--rounds`, default 3), on the same server:

- sequential: one connection, `--queries` recalls, wrk's p50/p99 (the
  latency a client sees, loopback included), then `/healthz` the same way;
- throughput: at each of `--connections` (default 16 and 64), /healthz then
  the recalls, and their ratio.

With `--churn MS`, an owner adds and confirms an entry every MS
milliseconds during the sequential recalls (each confirm is a new version
of the project's index: what a project under review looks like), and the
sequential figures say what recall costs while its index keeps changing.

It prints every round and then the median (min-max) of the rounds.
Goals: 10k in a hub of 200k, fused p50 <= 12 ms and p99 <= 40 ms, lexical
p50 <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.outside import Server, compare, load_average, ratios, request_line, show, spread, workdir, wrk_run  # noqa: E402
from bench.attest import profiled  # noqa: E402
from bench.recall_latency import COMMON, Text, add_trusted, checkpoint  # noqa: E402

TOKENS = 64
# Agent-style questions: about 14 words, half of them function words the
# query drops; {a}..{d} are content words.
FRAMES = (
    "how should I {a} the {b} when the {c} keeps failing in our {d} setup?",
    "what is the right way to handle {a} and {b} before we {c} the {d}",
    "why does the {a} step break with a {b} error after I changed the {c} {d}?",
    "where do we configure the {a} for {b} so that the {c} picks up {d}",
    "is there a known problem with {a} when {b} runs together with the {c} {d}?",
    "which {a} should I use for {b} in this project, and how does {c} fit {d}",
    "before I {a} anything, what do I need to know about the {b} and {c} {d}?",
    "can you remind me what we decided about {a} {b} for the {c} and the {d}",
)


def questions(text: Text, count: int) -> list[str]:
    out = []
    for n in range(count):
        a, b, c, d = text.pick(4)
        if n % 2:  # half the questions use everyday project words (synonyms, common terms)
            a = COMMON[text.rng.randrange(len(COMMON))]
        out.append(text.rng.choice(FRAMES).format(a=a, b=b, c=c, d=d))
    return out


async def build(url: str, entries: int, others: int, lexical: bool = False) -> list[str]:
    from gateway.core.clock import SystemClock
    from gateway.core.config import Config
    from gateway.hub import Hub

    # The server's model setting, so that the vectors carry its model's id.
    model_env = {k: v for k, v in os.environ.items() if k.startswith("RELAYROOM_SEMANTIC_")}
    hub = Hub(Config.from_env(model_env, database_url=url, sweep_interval=0.0, semantic_model="off" if lexical else None),
              clock=SystemClock())
    await hub.start(background=False)
    model = hub.recall.semantic.model_id if hub.recall.semantic is not None else None
    text = Text()
    try:
        now = hub.clock.now()
        per_project = 10_000
        for i in range((others + per_project - 1) // per_project):
            other = await hub.accounts.create_project(f"other-{i}")
            await add_trusted(hub, other.id, min(per_project, others - i * per_project), text, now, vectors=model)
            print(f"  {min(others, (i + 1) * per_project):,} of {others:,} other entries", file=sys.stderr, flush=True)
        project = await hub.accounts.create_project("target")
        await add_trusted(hub, project.id, entries, text, now, vectors="pending" if model else None)
        await checkpoint(hub)
        tokens = [await hub.accounts.create_token("target", "read", f"agent-{n}") for n in range(TOKENS)]
        return tokens + [await hub.accounts.create_token("target", "owner", "bench-owner")]
    finally:
        await hub.stop()


@contextlib.contextmanager
def churning(port: int, owner: str, every_ms: float) -> Iterator[list[int]]:
    """An owner adding and confirming an entry every `every_ms` ms while
    the block runs (nothing if 0); yields the count confirmed so far."""
    confirmed = [0]
    if not every_ms:
        yield confirmed
        return
    import httpx

    stop = threading.Event()

    def run() -> None:
        base = f"http://127.0.0.1:{port}/v1/projects/target/entries"
        with httpx.Client(headers={"Authorization": f"Bearer {owner}"}, timeout=10) as client:
            while not stop.wait(every_ms / 1000):
                statement = f"Churn entry {uuid.uuid4().hex} keeps the index moving."  # never a duplicate
                made = client.post(base, json={"kind": "fact", "statement": statement})
                if client.post(f"{base}/{made.json()['id']}/confirm").status_code == 200:
                    confirmed[0] += 1

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        yield confirmed
    finally:
        stop.set()
        worker.join(30)


def wait_for_vectors(url: str) -> float:
    """Seconds until no vector of the store is left to embed (0 at once if none ever was)."""
    import time

    from gateway.store import open_driver

    async def pending() -> int:
        driver = open_driver(url)
        await driver.open()
        try:
            row = await driver.read(lambda q: q.tx.one("SELECT COUNT(*) AS n FROM entry_vectors WHERE vector IS NULL"))
            return int(row["n"]) if row else 0
        finally:
            await driver.close()

    started = time.monotonic()
    while asyncio.run(pending()):
        time.sleep(1.0)
    return time.monotonic() - started


def recall_lines(asked: list[str], tokens: list[str]) -> list[str]:
    return [request_line("GET", f"/v1/projects/target/recall?q={quote(q)}", tokens[n % len(tokens)])
            for n, q in enumerate(asked)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=0)
    parser.add_argument("--queries", type=int, default=1000, help="sequential recalls per round")
    parser.add_argument("--requests", type=int, default=3000, help="recalls per throughput run")
    parser.add_argument("--connections", type=int, nargs="*", default=[16, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", default=None, help="record the server with py-spy into this file (see bench/attest.py)")
    parser.add_argument("--churn", type=float, default=0.0,
                        help="during the sequential recalls, an owner adds and confirms an entry every this many ms")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--during-fill", type=int, default=0, metavar="N",
                        help="first, N sequential recalls while the fill job embeds the target's entries")
    parser.add_argument("--lexical", action="store_true", help="RELAYROOM_SEMANTIC_MODEL=off: lexical recall alone")
    args = parser.parse_args()

    from bench.stores import backend, bench_database

    print(f"store: {backend()}; load average {load_average()}", file=sys.stderr)
    text = Text(seed=23)
    per_round = args.queries + args.requests * len(args.connections)
    asked = questions(text, 200 + per_round * args.rounds + args.during_fill)  # the last N: during the fill
    words = statistics.mean(len(q.split()) for q in asked)
    with workdir() as work, bench_database(work, "recall") as url:
        (work / "checkmaps").mkdir()
        *tokens, owner = asyncio.run(build(url, args.entries, args.others, args.lexical))
        lines = recall_lines(asked, tokens)
        env = {"RELAYROOM_DATABASE_URL": url, "RELAYROOM_CHECKMAPS": str(work / "checkmaps")}
        env.update({k: v for k, v in os.environ.items() if k.startswith("RELAYROOM_SEMANTIC_")})
        if args.lexical:
            env["RELAYROOM_SEMANTIC_MODEL"] = "off"
        sequential: list[tuple[dict[str, Any], dict[str, Any]]] = []
        loaded: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]] = {c: [] for c in args.connections}
        with Server(env, work) as server:
            if args.during_fill:
                show("recall, sequential, during the fill", wrk_run(server.port, lines[-args.during_fill:], 1, server_pid=server.pid))
            filled = wait_for_vectors(url)
            print(f"  the target's {args.entries:,} vectors written {filled:.0f} s after the server was ready", file=sys.stderr)
            wrk_run(server.port, lines[:200], 4)  # warm: page cache, statement caches
            wrk_run(server.port, [request_line("GET", "/healthz")] * 500, 4)
            at = 200
            spy = profiled(server.pid, args.profile)
            spy.__enter__()
            for r in range(args.rounds):
                print(f"-- round {r + 1} of {args.rounds}, load average {load_average()}", file=sys.stderr)
                with churning(server.port, owner, args.churn) as confirmed:
                    row = wrk_run(server.port, lines[at:at + args.queries], 1, server_pid=server.pid)
                if args.churn:
                    row["confirmed"] = confirmed[0]
                    print(f"  {confirmed[0]} entries confirmed during the round", file=sys.stderr)
                at += args.queries
                show("recall, sequential", row)
                health = wrk_run(server.port, [request_line("GET", "/healthz")] * args.queries, 1,
                                 server_pid=server.pid)
                show("/healthz, sequential", health)
                sequential.append((health, row))
                for c in args.connections:
                    batch = lines[at:at + args.requests]
                    at += args.requests
                    loaded[c] += compare(server, f"recall, {c} connections", [batch], c,
                                         baseline_requests=max(args.requests, 10_000))
            spy.__exit__(None, None, None)
    print(f"\n{args.entries:,} trusted entries in project target, {args.others:,} in other projects; "
          f"questions of {words:.1f} words on average; ranking {'lexical' if args.lexical else 'fused'}; "
          f"the target's vectors written {filled:.0f} s after start; {args.rounds} rounds, median (min-max):")
    print(f"  sequential recall p50 {spread([x['p50_ms'] for _, x in sequential], '{:.2f}')} ms, "
          f"p99 {spread([x['p99_ms'] for _, x in sequential], '{:.2f}')} ms; "
          f"server CPU {spread([x['server_cpu_us'] for _, x in sequential], '{:.0f}')} us per recall")
    print(f"  sequential /healthz p50 {spread([h['p50_ms'] for h, _ in sequential], '{:.2f}')} ms")
    for c, rounds in loaded.items():
        print(f"  {c} connections: recalls/s {spread([x['per_second'] for _, x in rounds], '{:.0f}')}, "
              f"ratio to /healthz {spread(ratios(rounds))}, p99 {spread([x['p99_ms'] for _, x in rounds], '{:.1f}')} ms, "
              f"server CPU {spread([x['server_cpu_us'] for _, x in rounds], '{:.0f}')} us per recall "
              f"(system {spread([x.get('server_sys_us', float('nan')) for _, x in rounds], '{:.0f}')})")
    statuses: dict[int, int] = {}
    for _, x in sequential + [pair for rounds in loaded.values() for pair in rounds]:
        for status, count in x["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    print(f"  statuses {statuses}; load average {load_average()}")
    if args.json:
        print(json.dumps({"sequential": sequential, "loaded": {str(c): r for c, r in loaded.items()}}))
    return 0 if set(statuses) == {200} else 1


if __name__ == "__main__":
    sys.exit(main())
