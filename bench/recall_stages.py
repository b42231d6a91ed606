"""Where a recall's time goes, stage by stage, in process (a diagnosis, not a
goal: the goals are measured from outside by bench/recall_outside.py).

    .venv/bin/python bench/recall_stages.py [--entries 30 10000] [--queries 300]

For a project of N trusted entries (SQLite, bench/recall_latency.py's text)
and bench/recall_outside.py's ~14-word questions, it times each stage on its
own, median and p99 in microseconds:

- plan: words, stop words, synonym expansion, kind hints (`plan_query`);
- count: the matching rows of the whole question (one FTS5 statement, up to
  COMMON_ROWS + 1 rows), and in a big project the per-phrase counts that
  decide what `prune` sets aside (one statement per phrase): what recall
  did before the counts were kept, shown for comparison;
- kept counts: the phrase counts as recall now reads them
  (`gateway.store.fts_counts`: the index's version, then the cache);
- rank: the BM25 statements (`SqliteFtsIndex._ranked`, kept counts included);
- index search: `SqliteFtsIndex.search` whole (rank + which hits are live);
- entries: the entries' rows, supports and contradictions;
- recall: the whole `Recall.recall` (budget count, search, entries, the
  recall record written through the group commit).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recall_latency import Text, add_trusted, checkpoint, percentile, settle_copies  # noqa: E402
from bench.recall_outside import questions  # noqa: E402


async def timed(samples: list[float], step: Callable[[], Awaitable[Any]]) -> Any:
    started = time.perf_counter()
    out = await step()
    samples.append((time.perf_counter() - started) * 1e6)
    return out


async def stages(entries: int, count: int) -> dict[str, list[float]]:
    from gateway.core.clock import SystemClock
    from gateway.core.config import Config
    from gateway.hub import Hub
    from gateway.knowledge.model import Principal
    from gateway.recall.search import COMMON_ROWS, DEFAULT_RANKING, Phrase, fts5_expression, plan_query
    from gateway.store.search_index import SqliteFtsIndex

    folder = Path(tempfile.mkdtemp(prefix="relayroom-stages-"))
    hub = Hub(Config.from_env({}, database_url=f"sqlite:///{folder / 's.db'}", sweep_interval=0.0), clock=SystemClock())
    await hub.start(background=False)
    out: dict[str, list[float]] = {k: [] for k in ("plan", "count", "per-phrase counts", "kept counts", "rank",
                                                   "index search", "entries", "recall")}
    try:
        text = Text(seed=23)
        project = await hub.accounts.create_project("target")
        await add_trusted(hub, project.id, entries, text, hub.clock.now())
        await checkpoint(hub)
        principal = Principal(project=project, name="bench-agent", level="read")
        asked = questions(text, count + 20)
        for q in asked[:20]:
            await hub.recall.recall(principal, q)
        await settle_copies(hub, principal, asked[0])
        table = SqliteFtsIndex.table(project.id)
        count_sql = f"SELECT COUNT(*) AS n FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?)"
        pruned = 0
        for q in asked[20:]:
            plan = await timed(out["plan"], lambda: asyncio.sleep(0, plan_query(q)))
            now = hub.clock.now()

            async def unit(tx_queries: Any) -> None:
                nonlocal pruned
                index = SqliteFtsIndex(tx_queries.tx)
                expression = fts5_expression(plan.phrases)
                row = await timed(out["count"], lambda: tx_queries.tx.one(count_sql, expression, COMMON_ROWS + 1))
                if row["n"] > COMMON_ROWS:
                    pruned += 1
                    started = time.perf_counter()
                    for phrase in plan.phrases:
                        await tx_queries.tx.one(count_sql, fts5_expression((phrase,)), COMMON_ROWS + 1)
                    out["per-phrase counts"].append((time.perf_counter() - started) * 1e6)
                cache = tx_queries.tx.phrase_counts
                keys = [(None, p.text, p.prefix) for p in plan.phrases]

                async def counted(key: Any) -> int:
                    row = await tx_queries.tx.one(count_sql, fts5_expression((Phrase(key[1], prefix=key[2]),)), COMMON_ROWS + 1)
                    return int(row["n"])

                await (await cache.table(tx_queries.tx, table)).counts(keys, counted)  # warm, as the recalls before left it

                async def kept() -> Any:
                    return await (await cache.table(tx_queries.tx, table)).counts(keys, counted)

                await timed(out["kept counts"], kept)
                await timed(out["rank"], lambda: index._ranked(project.id, plan, None, 30, DEFAULT_RANKING))
                hits = await timed(out["index search"], lambda: index.search(project.id, q, None, 10, now))
                await timed(out["entries"], lambda: tx_queries.entries_by_seqs([seq for seq, _ in hits]))

            await hub.driver.read(unit)
            await timed(out["recall"], lambda: hub.recall.recall(principal, q))
        print(f"  {entries:,} entries: {pruned} of {count} questions matched more than {COMMON_ROWS} rows (pruned)",
              file=sys.stderr)
    finally:
        await hub.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, nargs="+", default=[30, 10_000])
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    print("| project | stage | p50 us | p99 us |")
    print("|---|---|---:|---:|")
    for entries in args.entries:
        for stage, samples in asyncio.run(stages(entries, args.queries)).items():
            if samples:
                print(f"| {entries:,} entries | {stage} | {statistics.median(samples):.0f} | "
                      f"{percentile(samples, 99):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
