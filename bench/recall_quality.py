"""Recall quality on an evaluation set built from real public project documents.

    .venv/bin/python bench/recall_quality.py            # the table
    .venv/bin/python bench/recall_quality.py --misses   # dev queries whose first relevant entry is not first
    .venv/bin/python bench/recall_quality.py --json     # figures for programs

The set (bench/recall_eval/*.yaml) holds, per project, entries written in our
own words from that project's AGENTS.md / CONTRIBUTING.md / decision records,
and questions phrased the way an agent would ask, in other words than the
entry, each with the entries that answer it (the first listed is the best
answer: gain 2 in nDCG, the others 1).

Every project gets its own gateway project; entries go in through the real
core (learn, then an owner's confirm makes them trusted and indexes them),
and each ranking is asked through the real SQLite index (or PostgreSQL's,
with RELAYROOM_DATABASE_URL=postgresql://...: see bench/stores.py).

Queries are split into dev and test by a hash of their text, fixed once: tune
on dev, read test.  The held-out judge set is elsewhere, so a gain that shows
on dev only is not a gain.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.core.clock import ManualClock  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.knowledge.model import Principal  # noqa: E402
from gateway.recall.search import DEFAULT_RANKING, LADDER, Ranking  # noqa: E402

EVAL_DIR = Path(__file__).resolve().parent / "recall_eval"
K = 10


@dataclass(frozen=True)
class Query:
    project: str
    text: str
    relevant: tuple[str, ...]  # best answer first
    split: str


def split_of(project: str, text: str) -> str:
    digest = hashlib.sha256(f"{project}\n{text}".encode()).digest()
    return "dev" if digest[0] % 2 == 0 else "test"


def load(eval_dir: Path = EVAL_DIR) -> tuple[dict[str, list[dict[str, Any]]], list[Query]]:
    entries: dict[str, list[dict[str, Any]]] = {}
    queries: list[Query] = []
    for path in sorted(eval_dir.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        project = doc["project"]
        entries[project] = doc["entries"]
        ids = {e["id"] for e in doc["entries"]}
        for q in doc["queries"]:
            missing = [r for r in q["relevant"] if r not in ids]
            if missing:
                raise SystemExit(f"{path}: query {q['q']!r} names unknown entries {missing}")
            queries.append(Query(project, q["q"], tuple(q["relevant"]), split_of(project, q["q"])))
    return entries, queries


def gains(query: Query) -> dict[str, float]:
    return {r: (2.0 if i == 0 else 1.0) for i, r in enumerate(query.relevant)}


def reciprocal_rank(ranked: Sequence[str], query: Query) -> float:
    for i, entry in enumerate(ranked[:K]):
        if entry in query.relevant:
            return 1.0 / (i + 1)
    return 0.0


def ndcg(ranked: Sequence[str], query: Query) -> float:
    g = gains(query)
    dcg = sum(g.get(e, 0.0) / math.log2(i + 2) for i, e in enumerate(ranked[:K]))
    ideal = sorted(g.values(), reverse=True)[:K]
    idcg = sum(v / math.log2(i + 2) for i, v in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], query: Query, n: int = 5) -> float:
    return len(set(ranked[:n]) & set(query.relevant)) / len(query.relevant)


class Fixture:
    """A throwaway gateway holding every evaluation project, all entries trusted."""

    def __init__(self, folder: str, *, pooled: bool = False) -> None:
        config = Config.from_env({}, database_url=f"sqlite:///{folder}/eval.db", sweep_interval=0.0)
        self.hub = Hub(config, clock=ManualClock(start=1_800_000_000.0))
        self.pooled = pooled
        self.project_ids: dict[str, int] = {}
        self.names: dict[int, str] = {}  # entry seq -> eval id
        self.database: str | None = None

    async def build(self, entries: dict[str, list[dict[str, Any]]]) -> None:
        from bench.stores import create_database

        # RELAYROOM_DATABASE_URL=postgresql://... evaluates PostgreSQL's index (bench/stores.py).
        self.database = await create_database("quality")
        if self.database is not None:
            config = Config.from_env({}, database_url=self.database, sweep_interval=0.0)
            self.hub = Hub(config, clock=ManualClock(start=1_800_000_000.0))
        await self.hub.start(background=False)
        pool = await self.hub.accounts.create_project("pool") if self.pooled else None
        for slug, items in entries.items():
            project = pool or await self.hub.accounts.create_project(slug)
            owner = Principal(project=project, name="eval-owner", level="owner")
            self.project_ids[slug] = project.id
            for item in items:
                entry, _ = await self.hub.knowledge.learn(owner, item["kind"], item["statement"], item.get("evidence"))
                await self.hub.knowledge.confirm(owner, entry.id)
                self.names[entry.seq] = item["id"]

    async def ask(self, project: str, text: str, ranking: Ranking, kind: str | None = None) -> list[str]:
        project_id = self.project_ids[project]
        now = self.hub.clock.now()
        hits = await self.hub.driver.read(lambda q: q.index.search(project_id, text, kind, K, now, ranking=ranking))
        return [self.names[seq] for seq, _ in hits]

    async def close(self) -> None:
        await self.hub.stop()
        if self.database is not None:
            from bench.stores import drop_database

            await drop_database(self.database)


def score(rows: list[tuple[Query, list[str]]]) -> dict[str, float]:
    if not rows:
        return {"mrr@10": 0.0, "ndcg@10": 0.0, "recall@5": 0.0, "n": 0}
    n = len(rows)
    return {
        "mrr@10": sum(reciprocal_rank(r, q) for q, r in rows) / n,
        "ndcg@10": sum(ndcg(r, q) for q, r in rows) / n,
        "recall@5": sum(recall_at(r, q) for q, r in rows) / n,
        "n": n,
    }


async def evaluate(
    rankings: Sequence[Ranking], *, pooled: bool = False, misses: str | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    entries, queries = load()
    queries = [q for q in queries if q.relevant]  # the unanswerable ones are bench/recall_semantic.py's
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        fixture = Fixture(folder, pooled=pooled)
        await fixture.build(entries)
        try:
            for ranking in rankings:
                rows: list[tuple[Query, list[str]]] = []
                for query in queries:
                    rows.append((query, await fixture.ask(query.project, query.text, ranking)))
                results[ranking.name] = {
                    "dev": score([r for r in rows if r[0].split == "dev"]),
                    "test": score([r for r in rows if r[0].split == "test"]),
                    "all": score(rows),
                }
                if misses:
                    _print_misses(ranking.name, rows, misses)
        finally:
            await fixture.close()
    return results


def _print_misses(name: str, rows: list[tuple[Query, list[str]]], split: str) -> None:
    print(f"\n## misses of {name} ({split})")
    for query, ranked in rows:
        if query.split == split and (not ranked or ranked[0] != query.relevant[0]):
            print(f"  {query.project}: {query.text!r} want {list(query.relevant)} got {ranked[:5]}")


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    head = "| ranking | split | queries | MRR@10 | nDCG@10 | recall@5 |"
    lines = [head, "|---|---|---:|---:|---:|---:|"]
    for name, splits in results.items():
        for split in ("dev", "test", "all"):
            s = splits[split]
            lines.append(
                f"| {name} | {split} | {int(s['n'])} | {s['mrr@10']:.3f} | {s['ndcg@10']:.3f} | {s['recall@5']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--misses", nargs="?", const="dev", choices=["dev", "test"],
                        help="list the queries of a split (default dev) whose best answer is not first")
    parser.add_argument("--only", help="evaluate only the ranking of this name")
    args = parser.parse_args(argv)
    rankings: list[Ranking] = list(LADDER)
    if args.only:
        rankings = [r for r in rankings if r.name == args.only]
    per_project = asyncio.run(
        evaluate(rankings, misses=args.misses)
    )
    pooled = asyncio.run(
        evaluate(rankings, pooled=True, misses=args.misses)
    )
    if args.json:
        print(json.dumps({"per_project": per_project, "pooled": pooled}, indent=2))
        return 0
    entries, queries = load()
    queries = [q for q in queries if q.relevant]
    total = sum(len(v) for v in entries.values())
    dev = sum(1 for q in queries if q.split == "dev")
    print(f"{total} entries in {len(entries)} projects; {len(queries)} queries ({dev} dev, {len(queries) - dev} test)")
    print("\n### Per project (each project's own index, as in production)\n")
    print(table(per_project))
    print(f"\n### Pooled (all {total} entries in one project: the other projects' entries are distractors)\n")
    print(table(pooled))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
