"""Recall in process at 1k, 10k and 100k trusted entries in one project, alone
and inside a hub that also holds entries of other projects (SQLite, or
PostgreSQL with RELAYROOM_DATABASE_URL=postgresql://...: see bench/stores.py).

    .venv/bin/python bench/recall_latency.py                    # the full run (many minutes: embedding 100k entries)
    .venv/bin/python bench/recall_latency.py --sizes 1000 10000 --others 200000 --queries 200
    RELAYROOM_SEMANTIC_MODEL=off .venv/bin/python bench/recall_latency.py   # lexical alone

Entries are written straight through the store in big batches (the rows a
confirm would leave: state trusted, their recall index rows and their
vector placeholders), with synthetic statements drawn from a
Zipf-distributed vocabulary.  The other projects' vectors are random unit
rows (their recall is not measured); the project's own are made by the
fill job, timed: how long entries trusted at once wait for their vector
(until then the lexical stage finds them).  Then, per size:

- `lexical`: the store's lexical candidates with recall's query shaping;
- `recall`: the whole core call, fused when a model runs, including the
  record of the recall.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.core.clock import ManualClock  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.knowledge.model import Principal  # noqa: E402
from gateway.knowledge.trust import normalise_statement  # noqa: E402

BATCH = 20_000
KINDS = ("fact", "convention", "pitfall", "decision")
COMMON = (
    "test tests build run install config database migration deploy release docs lint format error cache server "
    "client api request response token secret branch commit review plugin module package version log debug "
    "timeout retry queue worker thread async file folder path name schema index query user project service "
    "container docker image ci pipeline job check coverage snapshot fixture mock proxy port host url json yaml"
).split()
ZIPF_OFFSET = 10
FUNCTION_WORDS = "the a an is are be to of in on for with when by from at as it this that not or and".split()
QUESTION_FRAMES = (
    "how do I {a} the {b}?", "why does {a} fail with {b}", "where is the {a} {b} configured",
    "what is the convention for {a} {b}", "any gotchas with {a} and {b}?", "{a} {b} {c}",
    "should I {a} before {b} {c}?", "which {a} do we use for {b}",
)


def vocabulary(rng: random.Random, size: int = 30_000) -> list[str]:
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    words = list(COMMON)
    seen = set(words)
    while len(words) < size:
        length = rng.randint(4, 11)
        word = "".join(rng.choice(letters[: rng.randint(8, 26)]) for _ in range(length))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Text:
    """Statements and questions over one Zipf-distributed vocabulary."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        # Zipf-Mandelbrot over content words: 1 / (rank + 10).  Plain Zipf
        # (offset 0) would put one content word in about half of all
        # entries, which real project text does not do.
        weights = [1.0 / (rank + ZIPF_OFFSET) for rank in range(len(self.words))]
        self.cum = list(_accumulate(weights))

    def pick(self, k: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum, k=k)

    def sentence(self, count: int) -> str:
        # Real statements are about 40% function words ("the", "is", "when"),
        # which queries drop; the content words follow the Zipf tail.
        out = []
        for _ in range(count):
            out.append(self.rng.choice(FUNCTION_WORDS) if self.rng.random() < 0.4 else self.pick(1)[0])
        return " ".join(out)

    def statement(self) -> str:
        return self.sentence(self.rng.randint(10, 25)).capitalize() + "."

    def evidence(self) -> str | None:
        return None if self.rng.random() < 0.4 else self.sentence(self.rng.randint(3, 12))

    def question(self) -> str:
        a, b, c = self.pick(3)
        return self.rng.choice(QUESTION_FRAMES).format(a=a, b=b, c=c)


def _accumulate(values: list[float]) -> list[float]:
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


async def add_trusted(hub: Hub, project_id: int, count: int, text: Text, now: float, *, vectors: str | None = None) -> None:
    """`count` trusted entries in `project_id`, written in batches; with
    `vectors`, their vector rows too: "pending" (placeholders the fill job
    embeds) or a model id (random unit vectors of that model, written now)."""
    import numpy

    rng = numpy.random.default_rng(project_id)
    done = 0
    while done < count:
        n = min(BATCH, count - done)
        rows = []
        for _ in range(n):
            statement = text.statement()
            rows.append((statement, text.evidence(), text.rng.choice(KINDS), normalise_statement(statement)))

        async def unit(q: Any, rows: list[tuple[str, str | None, str, str]] = rows) -> None:
            top = await q.tx.one("SELECT COALESCE(MAX(seq), 0) AS s FROM entries")
            first = int(top["s"]) + 1
            await q.tx.run_many(
                "INSERT INTO entries (id, project_id, kind, statement, evidence, norm_statement, state, created_at, "
                "created_by, created_via, expires_at, promoted_at, promoted_by, provenance) "
                "VALUES (?, ?, ?, ?, ?, ?, 'trusted', ?, 'bench', 'learn', NULL, ?, 'owner:bench', NULL)",
                [(f"kn_bench_{first + i}", project_id, kind, s, e, norm, now, now) for i, (s, e, kind, norm) in enumerate(rows)],
            )
            written = await q.tx.all("SELECT seq, statement, evidence, kind FROM entries WHERE project_id = ? AND seq >= ?", project_id, first)
            await q.index.add_many(project_id, [(r["seq"], r["kind"], None, r["statement"], r["evidence"]) for r in written])
            if vectors == "pending":
                await q.tx.run_many("INSERT INTO entry_vectors (seq, project_id) VALUES (?, ?)", [(r["seq"], project_id) for r in written])
            elif vectors is not None:
                # One unit vector per model in force (a model id names each, joined by "+").
                made = rng.standard_normal((len(written), len(vectors.split("+")), 384)).astype(numpy.float32)
                made = (made / numpy.linalg.norm(made, axis=2, keepdims=True)).reshape(len(written), -1)
                await q.tx.run_many(
                    "INSERT INTO entry_vectors (seq, project_id, model, vector) VALUES (?, ?, ?, ?)",
                    [(r["seq"], project_id, vectors, made[i].tobytes()) for i, r in enumerate(written)],
                )

        await hub.driver.write(unit)
        done += n


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def checkpoint(hub: Hub) -> None:
    """Fold the bulk load's write-ahead log into the database, so the
    figures are the steady state and not the first commits after a load
    (which would pay for checkpointing it).  On PostgreSQL: ANALYZE, the
    statistics autovacuum would gather a little later."""
    if hub.driver.dialect == "postgres":
        import asyncpg

        conn = await asyncpg.connect(hub.driver._dsn)  # type: ignore[attr-defined]
        try:
            await conn.execute("VACUUM ANALYZE")
        finally:
            await conn.close()
        return
    import sqlite3

    conn = sqlite3.connect(hub.config.database_url[len("sqlite:///"):])
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


async def measure(hub: Hub, principal: Principal, text: Text, queries: int) -> dict[str, float]:
    from gateway.recall import stages

    questions = [text.question() for _ in range(queries)]
    project_id, now = principal.project.id, hub.clock.now()
    for question in questions[:20]:  # warm the page cache, the statement cache, the project's matrix
        await hub.recall.recall(principal, question)
    lexical, whole, hits = [], [], []
    for question in questions:
        started = time.perf_counter()
        found = await hub.driver.read(lambda q: stages.candidates(q, project_id, question, None, 30, now))
        lexical.append((time.perf_counter() - started) * 1000)
        hits.append(len(found))
        started = time.perf_counter()
        await hub.recall.recall(principal, question)
        whole.append((time.perf_counter() - started) * 1000)
    return {
        "lexical_p50": statistics.median(lexical), "lexical_p99": percentile(lexical, 99),
        "recall_p50": statistics.median(whole), "recall_p99": percentile(whole, 99),
        "mean_hits": statistics.mean(hits),
    }


async def scenario(url: str, label: str, sizes: list[int], others: int, queries: int) -> list[tuple[str, int, dict[str, float]]]:
    config = Config.from_env(database_url=url, sweep_interval=0.0, recalls_per_hour=1_000_000)
    hub = Hub(config, clock=ManualClock(start=1_800_000_000.0))
    await hub.start(background=False)
    stage = hub.recall.semantic
    text = Text()
    rows = []
    try:
        now = hub.clock.now()
        if others:
            per_project = 10_000
            started = time.perf_counter()
            for i in range((others + per_project - 1) // per_project):
                other = await hub.accounts.create_project(f"other-{i}")
                await add_trusted(hub, other.id, min(per_project, others - i * per_project), text, now,
                                  vectors=stage.model_id if stage else None)
            print(f"  [{label}] {others:,} entries of other projects written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        project = await hub.accounts.create_project("target")
        principal = Principal(project=project, name="bench-agent", level="read")
        have = 0
        for size in sizes:
            await add_trusted(hub, project.id, size - have, text, now, vectors="pending" if stage else None)
            filled, started = 0, time.perf_counter()
            if stage is not None:
                filled = await stage.fill_all(hub.driver)
            fill = time.perf_counter() - started
            if filled:
                print(f"  [{label}] {filled:,} vectors filled in {fill:.1f} s ({filled / fill:.0f} a second)", file=sys.stderr)
            have = size
            await checkpoint(hub)
            measured = await measure(hub, principal, text, queries)
            measured["fill_s"] = fill
            rows.append((label, size, measured))
            print(f"  [{label}] measured at {size:,}", file=sys.stderr)
    finally:
        await hub.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--others", type=int, default=200_000, help="entries of other projects in the big hub")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dir", default=None, help="where the databases go (default a temporary folder)")
    args = parser.parse_args(argv)
    from bench.stores import backend, bench_database

    print(f"store: {backend()} (set RELAYROOM_DATABASE_URL=postgresql://... for PostgreSQL)", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        big = f"hub+{args.others // 1000}k"
        with bench_database(Path(folder), "alone") as url:
            rows = asyncio.run(scenario(url, "alone", args.sizes, 0, args.queries))
        if args.others:
            with bench_database(Path(folder), big) as url:
                rows += asyncio.run(scenario(url, big, args.sizes, args.others, args.queries))
    print("| hub | trusted entries in project | vectors filled in s | lexical p50 ms | lexical p99 ms | recall p50 ms | recall p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, size, m in rows:
        print(
            f"| {label} | {size:,} | {m['fill_s']:.1f} | {m['lexical_p50']:.2f} | {m['lexical_p99']:.2f} | "
            f"{m['recall_p50']:.2f} | {m['recall_p99']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
