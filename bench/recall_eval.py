"""Recall quality on the evaluation set, through the real recall service.

    .venv/bin/python bench/recall_eval.py                      # fused, as a plain install ranks
    RELAYROOM_SEMANTIC_MODEL=off .venv/bin/python bench/recall_eval.py   # lexical alone
    RELAYROOM_DATABASE_URL=postgresql://... .venv/bin/python bench/recall_eval.py   # on PostgreSQL
    .venv/bin/python bench/recall_eval.py --outside            # the same questions through `relayroom serve` over HTTP
    .venv/bin/python bench/recall_eval.py --dump dev           # each dev question: the rank of an answer, the first three
    .venv/bin/python bench/recall_eval.py --sweep              # fusion rules on the dev split (tuning)
    .venv/bin/python bench/recall_eval.py --outside --set holdout   # the held-out set (never tuned on)
    .venv/bin/python bench/recall_eval.py --outside --set long      # long entries (never tuned on)

The set (bench/recall_eval/*.yaml) holds, per project, entries written in our
own words from that project's contributor documents, and questions phrased
the way an agent asks, in other words than the entry, each with the entries
that answer it (the first listed is the best answer), or none (`relevant:
[]`: no answer in that project, for the no-answer figure).  Questions are
split into dev and test by a hash of their text, fixed once: tune on dev,
read test.

The held-out set (bench/recall_holdout/*.yaml, the same format, other
projects) was written blind, after every rule here was chosen, and is never
tuned on: no `--sweep` or `--dump` is run on it to change a rule.  It is read
to estimate how recall does on questions and projects nobody tuned for, and
to decide between two rankings; read its `all` figures.  The long-entry set
(bench/recall_long, `--set long`: statements of 3-6 sentences) is read the
same way.

Every entry goes in through the real core (learn, then an owner's confirm),
the fill job embeds them, and every question is asked with `Recall.recall`
(what REST and MCP call), in two settings: per project (each project's own
index, as in production) and pooled (every entry in one project: the other
projects' entries are distractors).  Figures: MRR@10 over the answerable
questions, and the AUROC of answerable against unanswerable questions by
the first result's score (a question with no result scores 0).

`--outside` asks the same questions as an agent does, through `relayroom
serve` at its shipped defaults over HTTP (bench/recall_eval_outside.py), and
computes the same figures from the answers: those are the quality figures;
the in-process run is for diagnosis (`--dump`, `--sweep`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.core.clock import ManualClock  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.knowledge.model import Principal  # noqa: E402
from gateway.recall import fusion, stages  # noqa: E402
from gateway.recall.ensemble import per_model  # noqa: E402
from gateway.recall.semantic import nearest  # noqa: E402

EVAL_DIR = Path(__file__).resolve().parent / "recall_eval"
HOLDOUT_DIR = Path(__file__).resolve().parent / "recall_holdout"
SETS = {"eval": EVAL_DIR, "holdout": HOLDOUT_DIR, "long": Path(__file__).resolve().parent / "recall_long"}
K = 10


@dataclass(frozen=True)
class Query:
    project: str
    text: str
    relevant: tuple[str, ...]  # best answer first; empty: nothing in the project answers it
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


def reciprocal_rank(ranked: Sequence[str], query: Query) -> float:
    for i, entry in enumerate(ranked[:K]):
        if entry in query.relevant:
            return 1.0 / (i + 1)
    return 0.0


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """The chance that an answerable question's first score beats an unanswerable one's (ties count half)."""
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


@dataclass
class Observed:
    """What the two stages said about one question, to replay fusion rules."""

    query: Query
    lexical: list[tuple[int, float]]  # the lexical candidates fusion saw (seq, score)
    first_text: str | None
    cosines: Any  # every entry's cosine per model (models, rows), in the matrix's row order
    answer: list[str]  # what Recall.recall returned (eval ids)
    scores: list[float]  # their scores


class Fixture:
    """A throwaway gateway holding the evaluation set, every entry trusted and embedded."""

    def __init__(self, database: str, *, pooled: bool) -> None:
        config = Config.from_env(database_url=database, sweep_interval=0.0, recalls_per_hour=1_000_000)
        self.hub = Hub(config, clock=ManualClock(start=1_800_000_000.0))
        self.pooled = pooled
        self.projects: dict[str, Principal] = {}
        self.names: dict[int, str] = {}  # entry seq -> eval id

    async def build(self, entries: dict[str, list[dict[str, Any]]]) -> None:
        await self.hub.start(background=False)
        pool = await self.hub.accounts.create_project("pool") if self.pooled else None
        for slug, items in entries.items():
            project = pool or await self.hub.accounts.create_project(slug)
            owner = Principal(project=project, name="eval-owner", level="owner")
            self.projects[slug] = owner
            for item in items:
                entry, _ = await self.hub.knowledge.learn(owner, item["kind"], item["statement"], item.get("evidence"))
                await self.hub.knowledge.confirm(owner, entry.id)
                self.names[entry.seq] = item["id"]
        if self.hub.recall.semantic is not None:
            await self.hub.recall.semantic.fill_all(self.hub.driver)

    async def observe(self, query: Query) -> Observed:
        owner = self.projects[query.project]
        _, results = await self.hub.recall.recall(owner, query.text, None, K)
        answer = [self.names[e.seq] for e, _ in results]
        scores = [score for _, score in results]
        pid, now = owner.project.id, self.hub.clock.now()
        stage = self.hub.recall.semantic

        async def stages_said(q: Any) -> tuple[list[tuple[int, float]], str | None, Any]:
            hits = await stages.candidates(q, pid, query.text, None, stages.HEADROOM, now)
            first = (await q.recalled_entries([hits[0][0]])).get(hits[0][0]) if hits else None
            text = f"{first.statement} {first.evidence or ''}" if first else None
            cosines = None
            if stage is not None:
                vectors = await stage.project_vectors(q, pid)
                held = vectors is not None and vectors.matrix is not None
                if held:
                    cosines = per_model(vectors.matrix, await stage.embed_query(query.text), vectors.widths)
            return hits, text, cosines

        hits, text, cosines = await self.hub.driver.read(stages_said)
        return Observed(query, hits, text, cosines, answer, scores)

    async def close(self) -> None:
        await self.hub.stop()


async def observe(pooled: bool, queries: list[Query], entries: dict[str, list[dict[str, Any]]]) -> tuple[list[Observed], Any]:
    from bench.stores import create_database, drop_database

    with tempfile.TemporaryDirectory() as folder:
        database = await create_database("eval") or f"sqlite:///{folder}/eval.db"
        fixture = Fixture(database, pooled=pooled)
        try:
            await fixture.build(entries)
            observed = [await fixture.observe(q) for q in queries]
            stage = fixture.hub.recall.semantic
            vectors = {}
            if stage is not None:
                for slug, owner in fixture.projects.items():
                    found = await fixture.hub.driver.read(lambda q, pid=owner.project.id: stage.project_vectors(q, pid))
                    vectors[slug] = (found, fixture.names)
            return observed, vectors
        finally:
            await fixture.close()
            if database.startswith("postgres"):
                await drop_database(database)


def replay(o: Observed, vectors: Any, rule: fusion.FusionRule) -> tuple[list[str], float]:
    """Recall's fused ranking of one question under `rule`, from what was observed."""
    matrix, names = vectors[o.query.project]
    cosine, top, sure, similarity = nearest(matrix, None, None, stages.CANDIDATES, per_model=o.cosines)
    for seq, _ in o.lexical:
        if seq not in cosine and seq in matrix.row:
            cosine[seq] = float(similarity[matrix.row[seq]])
    readings = fusion.read(o.query.text, o.first_text, [s for _, s in o.lexical[:2]], top, matrix.df, rule, sure)
    ranked = fusion.fuse(o.lexical, cosine, readings, rule)[:K]
    scored = fusion.scored(ranked, fusion.relevance(readings, rule))
    return [names[seq] for seq, _ in scored], (scored[0][1] if scored else 0.0)


def figures(rows: list[tuple[Query, list[str], float]]) -> dict[str, dict[str, float]]:
    out = {}
    for split in ("dev", "test", "all"):
        chosen = [r for r in rows if split == "all" or r[0].split == split]
        answerable = [r for r in chosen if r[0].relevant]
        mrr = sum(reciprocal_rank(a, q) for q, a, _ in answerable) / max(1, len(answerable))
        roc = auroc([s for q, _, s in chosen if q.relevant], [s for q, _, s in chosen if not q.relevant])
        out[split] = {"mrr@10": round(mrr, 4), "auroc": round(roc, 4), "questions": len(chosen)}
    # How often the first result answers, by its score: is the confidence a chance?
    out["first right by first score"] = {
        f"{lo}-{hi}": f"{sum(bool(a) and a[0] in q.relevant for q, a, _ in band)} of {len(band)}"
        for lo, hi in ((0, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 1))
        for band in [[r for r in rows if lo <= r[2] < hi or (hi == 1 and r[2] == 1)]]
    }
    return out


def sweep(observed: list[Observed], vectors: Any) -> None:
    grid = []
    for base in (0.2, 0.3, 0.4, 0.5):
        for margin in (0.0, 0.2, 0.4, 0.6):
            for separation in (0.0, 1.0, 2.0, 3.0):
                rule = dataclasses.replace(fusion.DEFAULT_RULE, base=base, margin_gain=margin, separation_gain=separation)
                rows = [(o.query, *replay(o, vectors, rule)) for o in observed if o.query.split == "dev"]
                grid.append((figures(rows)["dev"]["mrr@10"], base, margin, separation))
    for mrr, base, margin, separation in sorted(grid, reverse=True)[:10]:
        print(f"dev MRR@10 {mrr:.4f}  base {base} margin_gain {margin} separation_gain {separation}")


def dump(setting: str, answered: list[tuple[Query, list[str], list[float]]], entries: dict[str, list[dict[str, Any]]]) -> None:
    """One line per question: its project, the answers wanted, the rank of
    the first of them returned (None: not in the first ten), and the first
    three returned with their projects and scores: in the pooled setting the
    projects show whether another project's entry came first."""
    project_of = {item["id"]: slug for slug, items in entries.items() for item in items}
    for q, answer, scores in answered:
        rank = next((i + 1 for i, a in enumerate(answer) if a in q.relevant), None) if q.relevant else None
        first = "  ".join(f"{a}({project_of[a]}) {s:.3f}" for a, s in zip(answer[:3], scores))
        print(f"{setting}\t{q.project}\t{q.text!r}\twant {list(q.relevant)}\trank {rank}\t{first}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--outside", action="store_true",
                        help="ask through `relayroom serve` over HTTP, as an agent does (bench/recall_eval_outside.py)")
    parser.add_argument("--sweep", action="store_true", help="rank the dev split under a grid of fusion rules")
    parser.add_argument("--only", choices=["per-project", "pooled"])
    parser.add_argument("--split", choices=["dev", "test"], help="ask only this split's questions (tune on dev without reading test)")
    parser.add_argument(
        "--dump", choices=["dev", "test", "all"],
        help="each question of a split: its project, the answers wanted, the rank of the first, the first three returned",
    )
    parser.add_argument("--set", choices=sorted(SETS), default="eval",
                        help="bench/recall_eval (tuned on its dev split), or a set read and never tuned on: "
                             "bench/recall_holdout (other projects), bench/recall_long (long entries)")
    args = parser.parse_args(argv)
    if args.outside and args.sweep:
        parser.error("--sweep replays the stages in process; it cannot run --outside")
    if args.set != "eval" and (args.sweep or args.dump):
        parser.error(f"the {args.set} set is read, never tuned on: no --sweep or --dump")
    entries, queries = load(SETS[args.set])
    queries = [q for q in queries if args.split in (None, q.split)]
    report: dict[str, Any] = {"set": args.set, "store": "postgres" if os.environ.get("RELAYROOM_DATABASE_URL", "").startswith("postgres") else "sqlite"}
    settings = [s for s in ("per-project", "pooled") if not args.only or args.only == s]
    answered: dict[str, list[tuple[Query, list[str], list[float]]]] = {}
    if args.outside:
        from bench.recall_eval_outside import answers

        answered, report["outside"] = answers(entries, queries, settings, K)
    for setting in settings:
        if not args.outside:
            observed, vectors = asyncio.run(observe(setting == "pooled", queries, entries))
            answered[setting] = [(o.query, o.answer, o.scores) for o in observed]
            if args.sweep and vectors:
                print(f"## {setting}")
                sweep(observed, vectors)
        # First scores as REST carries them (6 decimals): two equal confidences
        # that differ in the last bit of a float are a tie, not a ranking.
        report[setting] = figures([(q, answer, round(scores[0], 6) if scores else 0.0)
                                   for q, answer, scores in answered[setting]])
        if args.dump:
            dump(setting, [r for r in answered[setting] if args.dump in ("all", r[0].split)], entries)
    report["entries"] = sum(len(v) for v in entries.values())
    report["questions"] = len(queries)
    print(json.dumps(report, indent=None if not args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
