"""Recall latency at 1k, 10k and 100k trusted entries in one project, alone
and inside a hub that also holds ~1M entries of other projects (SQLite, or
PostgreSQL with RELAYROOM_DATABASE_URL=postgresql://...: see bench/stores.py).

    .venv/bin/python bench/recall_latency.py                    # the full run (a few minutes)
    .venv/bin/python bench/recall_latency.py --sizes 1000 10000 --others 100000 --queries 200   # quicker

Entries are written straight through the store in big batches (the rows a
confirm would leave: state trusted, plus their recall index rows), with
synthetic statements drawn from a Zipf-distributed vocabulary, so the build
stays bounded in time.  Two figures per size:

- `search`: the index lookup and the entries' rows (what ranking costs);
- `recall`: the whole core call, including the record of the recall
  (`recalls` + `recall_results`, one group-committed write).

Targets (issue 4): p50 <= 3 ms at 10k inside the 1M hub, <= 5 ms at 100k.

    .venv/bin/python bench/recall_latency.py --padded-quality 100000

measures ranking instead of time at that size: bench/recall_eval's questions,
each project's entries padded with that many synthetic entries of the text
above (MRR@10 / nDCG@10 / recall@5 as bench/recall_quality.py counts them).
bench/recall_quality.py's own projects are small; a big project is where a
store that sets common words aside ranks differently from one that does not.
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


async def add_trusted(hub: Hub, project_id: int, count: int, text: Text, now: float) -> None:
    """`count` trusted entries in `project_id`, written in batches."""
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
            # The identity column numbers the rows; index what was just
            # written, as the index itself does (its counts too, on PostgreSQL).
            written = await q.tx.all("SELECT seq, statement, evidence, kind FROM entries WHERE project_id = ? AND seq >= ?", project_id, first)
            await q.index.add_many(project_id, [(r["seq"], r["kind"], None, r["statement"], r["evidence"]) for r in written])

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


async def settle_copies(hub: Hub, principal: Principal, question: str) -> None:
    """On SQLite, a big project's index held as arrays, as a settled server
    holds it (a server loads a version once searches have seen it for
    STABLE_FOR seconds; in process that wait is dropped): one recall starts
    the load, then wait for it."""
    if not hasattr(hub.driver, "copies_loaded"):
        return
    from gateway.store import fts_arrays

    fts_arrays.STABLE_FOR = 0.0
    await hub.recall.recall(principal, question)
    await hub.driver.copies_loaded()


async def measure(hub: Hub, principal: Principal, text: Text, queries: int) -> dict[str, float]:
    questions = [text.question() for _ in range(queries)]
    project_id, now = principal.project.id, hub.clock.now()
    for question in questions[:20]:  # warm the page cache and the statement cache
        await hub.recall.recall(principal, question)
    await settle_copies(hub, principal, questions[0])
    search, whole, hits = [], [], []
    for question in questions:
        started = time.perf_counter()
        found = await hub.driver.read(lambda q: q.search(project_id, question, None, 10, now))
        search.append((time.perf_counter() - started) * 1000)
        hits.append(len(found))
        started = time.perf_counter()
        await hub.recall.recall(principal, question)
        whole.append((time.perf_counter() - started) * 1000)
    return {
        "search_p50": statistics.median(search), "search_p99": percentile(search, 99),
        "recall_p50": statistics.median(whole), "recall_p99": percentile(whole, 99),
        "mean_hits": statistics.mean(hits),
    }


async def scenario(url: str, label: str, sizes: list[int], others: int, queries: int) -> list[tuple[str, int, dict[str, float]]]:
    config = Config.from_env({}, database_url=url, sweep_interval=0.0)
    hub = Hub(config, clock=ManualClock(start=1_800_000_000.0))
    await hub.start(background=False)
    text = Text()
    rows = []
    try:
        now = hub.clock.now()
        if others:
            per_project = 10_000
            started = time.perf_counter()
            for i in range((others + per_project - 1) // per_project):
                other = await hub.accounts.create_project(f"other-{i}")
                await add_trusted(hub, other.id, min(per_project, others - i * per_project), text, now)
            print(f"  [{label}] {others:,} entries of other projects written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        project = await hub.accounts.create_project("target")
        principal = Principal(project=project, name="bench-agent", level="read")
        have = 0
        for size in sizes:
            await add_trusted(hub, project.id, size - have, text, now)
            have = size
            await checkpoint(hub)
            rows.append((label, size, await measure(hub, principal, text, queries)))
            print(f"  [{label}] measured at {size:,}", file=sys.stderr)
    finally:
        await hub.stop()
    return rows


async def padded_quality(url: str, pad: int) -> dict[str, dict[str, float]]:
    """The evaluation set's ranking with `pad` synthetic entries in each of its projects."""
    from bench.recall_quality import K, load, score

    config = Config.from_env({}, database_url=url, sweep_interval=0.0)
    hub = Hub(config, clock=ManualClock(start=1_800_000_000.0))
    await hub.start(background=False)
    try:
        entries, queries = load()
        queries = [q for q in queries if q.relevant]  # the unanswerable ones are bench/recall_semantic.py's
        text = Text()
        project_ids: dict[str, int] = {}
        names: dict[int, str] = {}
        started = time.perf_counter()
        for slug, items in entries.items():
            project = await hub.accounts.create_project(slug)
            owner = Principal(project=project, name="eval-owner", level="owner")
            project_ids[slug] = project.id
            for item in items:
                entry, _ = await hub.knowledge.learn(owner, item["kind"], item["statement"], item.get("evidence"))
                await hub.knowledge.confirm(owner, entry.id)
                names[entry.seq] = item["id"]
            await add_trusted(hub, project.id, pad, text, hub.clock.now())
        await checkpoint(hub)
        print(f"  {len(entries)} projects padded with {pad:,} entries each in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        now = hub.clock.now()
        rows = []
        for query in queries:
            project_id = project_ids[query.project]
            hits = await hub.driver.read(lambda q: q.index.search(project_id, query.text, None, K, now))
            rows.append((query, [names.get(seq, f"padding-{seq}") for seq, _ in hits]))
        return {split: score([r for r in rows if split == "all" or r[0].split == split]) for split in ("dev", "test", "all")}
    finally:
        await hub.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--others", type=int, default=1_000_000, help="entries of other projects in the big hub")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dir", default=None, help="where the databases go (default a temporary folder)")
    parser.add_argument(
        "--padded-quality", type=int, default=0, metavar="N",
        help="instead of timing: rank bench/recall_eval with N synthetic entries in each of its projects",
    )
    args = parser.parse_args(argv)
    from bench.stores import backend, bench_database

    print(f"store: {backend()} (set RELAYROOM_DATABASE_URL=postgresql://... for PostgreSQL)", file=sys.stderr)
    if args.padded_quality:
        with tempfile.TemporaryDirectory(dir=args.dir) as folder, bench_database(Path(folder), "padded") as url:
            splits = asyncio.run(padded_quality(url, args.padded_quality))
        print("| store | entries per project | split | queries | MRR@10 | nDCG@10 | recall@5 |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for split, m in splits.items():
            print(
                f"| {backend()} | {args.padded_quality:,} + eval | {split} | {int(m['n'])} | {m['mrr@10']:.3f} | "
                f"{m['ndcg@10']:.3f} | {m['recall@5']:.3f} |"
            )
        return 0
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        big = f"hub+{args.others // 1000}k"
        with bench_database(Path(folder), "alone") as url:
            rows = asyncio.run(scenario(url, "alone", args.sizes, 0, args.queries))
        with bench_database(Path(folder), big) as url:
            rows += asyncio.run(scenario(url, big, args.sizes, args.others, args.queries))
    print("| hub | trusted entries in project | search p50 ms | search p99 ms | recall p50 ms | recall p99 ms | mean hits |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, size, m in rows:
        print(
            f"| {label} | {size:,} | {m['search_p50']:.2f} | {m['search_p99']:.2f} | {m['recall_p50']:.2f} | "
            f"{m['recall_p99']:.2f} | {m['mean_hits']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
