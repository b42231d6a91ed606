"""Why the fused ranking stands where it does: the failures, and what else was tried.

    .venv/bin/python bench/recall_semantic.py --model DIR --save /tmp/observed.pkl
    .venv/bin/python bench/recall_semantic_diagnose.py /tmp/observed.pkl            # the diagnosis
    .venv/bin/python bench/recall_semantic_diagnose.py /tmp/observed.pkl --failures dev [--pooled]
    .venv/bin/python bench/recall_semantic_diagnose.py /tmp/observed.pkl /tmp/observed-pg.pkl --grid

It reads what bench/recall_semantic.py observed (each question's lexical
candidates with their scores, the cosine of every entry), so every figure
here comes from the same inputs as that script's tables, in a second.

- agreement: on how many questions the two sides put the same entry first,
  and, where they differ and one of them is right, how often each ranking
  takes the right one; and on how many questions the rule and a fixed
  weight rank differently at all (why the rule barely beats a fixed weight).
- pooled: of the questions the rule misses in the pooled index, how many it
  misses because another project's entry comes first, and the MRR the very
  same ranking has once other projects' entries are struck out.
- the rare-token override: how often it fires, and whether it changes any
  ranking.
- the first 150 entries (whose questions were written by the hands that
  wrote the synonym table) against the 204 written later.
- variants tried and not kept: candidate pools of other sizes, min-max and
  z-score scaling, reciprocal rank fusion, a kind-hint boost on the
  semantic side, and other per-question weights (without the lexical
  margin; with the share of the question's IDF the best lexical hit holds),
  each the best of a small grid on dev.
- paired: on how many questions the rule beats a fixed a=0.3 and loses to
  it, the difference with a bootstrap 95% interval, and the ceiling of any
  per-question weight (the best of 21 weights, question by question).

`--failures dev|test` prints each question whose best answer the rule does
not put first: what it wanted, where each side ranked it, each side's first
four, the readings.  No figure here feeds back into the rule.
"""

from __future__ import annotations

import argparse
import itertools
import math
import pickle
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recall_quality import K, load, reciprocal_rank  # noqa: E402
from bench.recall_semantic import Observed, rank_cosine, rank_fused, rank_lexical  # noqa: E402
from gateway.recall import fusion, stages  # noqa: E402
from gateway.recall.search import hinted_kinds, terms, words  # noqa: E402

FIRST_PROJECTS = {"codex", "backstage", "httpx", "datasette", "uv", "warehouse"}  # the first 150 entries
Ranker = Callable[[Observed], list[str]]


def mrr(observed: Sequence[Observed], ranker: Ranker) -> float:
    chosen = [o for o in observed if o.query.relevant]
    return sum(reciprocal_rank(ranker(o), o.query) for o in chosen) / max(1, len(chosen))


def split(observed: Sequence[Observed], name: str) -> list[Observed]:
    return [o for o in observed if o.query.split == name]


def rule(o: Observed) -> list[str]:
    return rank_fused(o, fusion.DEFAULT_RULE)[0]


def fixed(weight: float) -> Ranker:
    return lambda o: rank_fused(o, fusion.DEFAULT_RULE, fixed=weight)[0]


def variant(
    o: Observed,
    *,
    pool_lexical: int = stages.CANDIDATES,
    pool_cosine: int = stages.CANDIDATES,
    scale: str = "best",
    weight: float | None = None,
    rrf: int | None = None,
    kinds: dict[str, str] | None = None,
    kind_boost: float = 0.0,
) -> list[str]:
    """The fusion with one thing changed; `scale`: best (recall's: score / best),
    minmax (over the candidates), z (mean and deviation of the candidates)."""
    lexical = o.lexical[:pool_lexical]
    by_cosine = sorted(o.cosine.items(), key=lambda item: -item[1])
    near = dict(by_cosine[:pool_cosine])
    for name, _, _ in lexical:
        near[name] = o.cosine.get(name, 0.0)
    top = [c for _, c in by_cosine[:2]]
    readings = fusion.read(o.query.text, lexical[0][2] if lexical else None, [s for _, s, _ in lexical[:2]], top, o.df)
    a = readings.weight if weight is None else weight
    scores = {name: s for name, s, _ in lexical}
    hinted = hinted_kinds(o.query.text) if kinds else frozenset()
    fused: dict[str, float] = {}
    if rrf is not None:
        lexical_rank = {name: i for i, (name, _, _) in enumerate(lexical)}
        cosine_rank = {name: i for i, (name, _) in enumerate(by_cosine)}
        for name in near:
            fused[name] = (a / (rrf + lexical_rank[name]) if name in lexical_rank else 0.0) + (1 - a) / (rrf + cosine_rank[name])
    else:
        lv, cv = list(scores.values()) or [0.0], [c for _, c in by_cosine[:pool_cosine]]
        if scale == "best":
            lo_l, hi_l, lo_c, hi_c = 0.0, max(lv), 0.0, cv[0]
        elif scale == "minmax":
            lo_l, hi_l, lo_c, hi_c = (min(lv) if len(lexical) >= pool_lexical else 0.0), max(lv), cv[-1], cv[0]
        else:  # z
            mean_l, sd_l = statistics.mean(lv), (statistics.pstdev(lv) if len(lv) > 1 else 1.0) or 1.0
            mean_c, sd_c = statistics.mean(cv), statistics.pstdev(cv) or 1.0
            lo_l, hi_l, lo_c, hi_c = mean_l, mean_l + sd_l, mean_c, mean_c + sd_c
        for name in near:
            lex = (scores.get(name, lo_l) - lo_l) / (hi_l - lo_l) if hi_l > lo_l else 0.0
            sem = (near[name] - lo_c) / (hi_c - lo_c) if hi_c > lo_c else 0.0
            if kinds and kinds.get(name) in hinted:
                sem *= 1.0 + kind_boost
            fused[name] = a * lex + (1 - a) * sem
    return [name for name, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:K]]


def idf_share(o: Observed) -> float:
    """Share of the question's IDF (over the project's entries) that the best
    lexical hit holds: how well matched the words are, not only how far ahead."""
    def idf(word: str) -> float:
        held = o.df.get(word, 0)
        return math.log(1 + (o.n - held + 0.5) / (held + 0.5))

    if not o.lexical:
        return 0.0
    asked = terms(o.query.text)
    held = set(words(o.lexical[0][2]))
    return sum(idf(t) for t in asked if t in held) / (sum(idf(t) for t in asked) or 1.0)


def weighted(weight: Callable[[Observed, fusion.Readings], float]) -> Ranker:
    """The rule's fusion with another per-question weight (the rare-token floor kept)."""
    def ranker(o: Observed) -> list[str]:
        lexical = o.lexical[: stages.CANDIDATES]
        top = sorted(o.cosine.values(), reverse=True)[:2]
        r = fusion.read(o.query.text, lexical[0][2] if lexical else None, [s for _, s, _ in lexical[:2]], top, o.df)
        a = weight(o, r)
        a = max(a, fusion.DEFAULT_RULE.rare_weight) if r.rare_match else a
        return rank_fused(o, fusion.DEFAULT_RULE, fixed=max(0.0, min(1.0, a)))[0]
    return ranker


def paired(observed: Sequence[Observed]) -> dict[str, float]:
    chosen = [o for o in observed if o.query.relevant]
    by_rule = [reciprocal_rank(rule(o), o.query) for o in chosen]
    by_fixed = [reciprocal_rank(fixed(0.3)(o), o.query) for o in chosen]
    ceiling = [max(reciprocal_rank(fixed(w / 20)(o), o.query) for w in range(21)) for o in chosen]
    diff = [a - b for a, b in zip(by_rule, by_fixed)]
    rng = random.Random(1)
    means = sorted(sum(diff[rng.randrange(len(diff))] for _ in diff) / len(diff) for _ in range(2000))
    return {"better": sum(d > 0 for d in diff), "worse": sum(d < 0 for d in diff), "diff": sum(diff) / len(diff),
            "low": means[50], "high": means[1949], "ceiling": sum(ceiling) / len(ceiling)}


def _separation_in_spreads(o: Observed) -> float:
    best = sorted(o.cosine.values(), reverse=True)[: stages.CANDIDATES]
    return (best[0] - best[1]) / (statistics.pstdev(best) or 1.0) if len(best) > 1 else 0.0


def owners() -> tuple[dict[str, str], dict[str, str]]:
    entries, _ = load()
    owner = {e["id"]: slug for slug, items in entries.items() for e in items}
    kind = {e["id"]: e["kind"] for items in entries.values() for e in items}
    return owner, kind


def agreement(observed: Sequence[Observed]) -> dict[str, int]:
    out = {"questions": 0, "same_first": 0, "same_first_right": 0, "one_side_right": 0, "rule_right": 0,
           "fixed_0.3_right": 0, "rule_and_fixed_differ": 0}
    for o in observed:
        if not o.query.relevant:
            continue
        out["questions"] += 1
        ranked_rule, ranked_fixed = rule(o), fixed(0.3)(o)
        out["rule_and_fixed_differ"] += reciprocal_rank(ranked_rule, o.query) != reciprocal_rank(ranked_fixed, o.query)
        lexical_first = o.lexical[0][0] if o.lexical else None
        cosine_first = max(o.cosine, key=lambda name: o.cosine[name])
        if lexical_first == cosine_first:
            out["same_first"] += 1
            out["same_first_right"] += cosine_first in o.query.relevant
        elif lexical_first in o.query.relevant or cosine_first in o.query.relevant:
            out["one_side_right"] += 1
            out["rule_right"] += bool(ranked_rule) and ranked_rule[0] in o.query.relevant
            out["fixed_0.3_right"] += bool(ranked_fixed) and ranked_fixed[0] in o.query.relevant
    return out


def pooled_misses(observed: Sequence[Observed], owner: dict[str, str]) -> dict[str, float]:
    answerable = [o for o in observed if o.query.relevant]
    missed = other_first = 0
    own_only = 0.0
    for o in answerable:
        ranked = rule(o)
        home = owner[o.query.relevant[0]]
        if not ranked or ranked[0] not in o.query.relevant:
            missed += 1
            other_first += bool(ranked) and owner[ranked[0]] != home
        own_only += reciprocal_rank([name for name in ranked if owner[name] == home], o.query)
    return {"questions": len(answerable), "missed": missed, "another_project_first": other_first,
            "mrr": mrr(answerable, rule), "mrr_other_projects_struck_out": own_only / max(1, len(answerable))}


def rare_override(observed: Sequence[Observed]) -> dict[str, float]:
    fired = changed = agreed = 0
    gain = 0.0
    off = replace(fusion.DEFAULT_RULE, rare_weight=0.0)
    for o in observed:
        lexical = o.lexical[: stages.CANDIDATES]
        if not lexical:
            continue
        top = sorted(o.cosine.values(), reverse=True)[:2]
        if fusion.read(o.query.text, lexical[0][2], [s for _, s, _ in lexical[:2]], top, o.df).rare_match:
            fired += 1
            agreed += lexical[0][0] == max(o.cosine, key=lambda name: o.cosine[name])
            with_it, without = rule(o), rank_fused(o, off)[0]
            changed += with_it != without
            if o.query.relevant:
                gain += reciprocal_rank(with_it, o.query) - reciprocal_rank(without, o.query)
    return {"fired": fired, "both_sides_same_first": agreed, "top_10_changed": changed, "reciprocal_rank_gained": round(gain, 3)}


def failures(observed: Sequence[Observed], name: str) -> None:
    for o in split(observed, name):
        q = o.query
        ranked = rule(o)
        if not q.relevant or (ranked and ranked[0] == q.relevant[0]):
            continue

        def at(ids: Sequence[str]) -> str:
            return next((str(i + 1) for i, n in enumerate(ids) if n == q.relevant[0]), "-")

        by_cosine = sorted(o.cosine, key=lambda n: -o.cosine[n])
        lexical = o.lexical[: stages.CANDIDATES]
        top = [o.cosine[n] for n in by_cosine[:2]]
        r = fusion.read(q.text, lexical[0][2] if lexical else None, [s for _, s, _ in lexical[:2]], top, o.df)
        print(f"{q.text!r} wants {q.relevant[0]}: rule {at(ranked)}, lexical {at([n for n, _, _ in o.lexical])}, "
              f"cosine {at(by_cosine)}; a={r.weight:.2f} margin={r.lexical_margin:.2f} separation={r.separation:.3f}")
        print("    lexical:", ", ".join(f"{n} {s:.2f}" for n, s, _ in lexical[:4]))
        print("    cosine: ", ", ".join(f"{n} {o.cosine[n]:.3f}" for n in by_cosine[:4]),
              f"(wanted: {o.cosine.get(q.relevant[0], 0.0):.3f})")
        print("    rule:   ", ", ".join(ranked[:4]))


def grid(loaded: Sequence[dict[str, list[Observed]]]) -> None:
    """Dev only picks; test is printed beside it to show how little the picks mean."""
    rows = []
    for base, margin_gain, separation_gain in itertools.product((0.2, 0.3, 0.4, 0.5), (0.0, 0.2, 0.4, 0.6), (0.0, 1.0, 2.0, 3.0)):
        r = replace(fusion.DEFAULT_RULE, base=base, margin_gain=margin_gain, separation_gain=separation_gain)
        ranker = lambda o, r=r: rank_fused(o, r)[0]  # noqa: E731
        dev = [mrr(split(obs[m], "dev"), ranker) for obs in loaded for m in ("per_project", "pooled")]
        test = [mrr(split(obs[m], "test"), ranker) for obs in loaded for m in ("per_project", "pooled")]
        rows.append((sum(dev) / len(dev), dev, test, (base, margin_gain, separation_gain)))
    rows.sort(reverse=True)
    current = (fusion.DEFAULT_RULE.base, fusion.DEFAULT_RULE.margin_gain, fusion.DEFAULT_RULE.separation_gain)
    print("mean dev | dev per file (per project, pooled) | test likewise | base, margin_gain, separation_gain")
    for row in rows[:10] + [r for r in rows if r[3] == current]:
        print(f"{row[0]:.3f} | " + " ".join(f"{v:.3f}" for v in row[1]) + " | " + " ".join(f"{v:.3f}" for v in row[2])
              + f" | {row[3]}" + ("  <- recall's" if row[3] == current else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("observed", nargs="+", help="a file written by bench/recall_semantic.py --save (several with --grid)")
    parser.add_argument("--grid", action="store_true",
                        help="the rule's three numbers over a grid, by the mean dev MRR@10 of every file's two indexes")
    parser.add_argument("--failures", choices=("dev", "test"))
    parser.add_argument("--pooled", action="store_true", help="with --failures: the pooled index's")
    args = parser.parse_args(argv)
    loaded = []
    for path in args.observed:
        with open(path, "rb") as f:
            loaded.append(pickle.load(f))
    if args.grid:
        grid(loaded)
        return 0
    observed: dict[str, list[Observed]] = loaded[0]
    if args.failures:
        failures(observed["pooled" if args.pooled else "per_project"], args.failures)
        return 0
    owner, kind = owners()
    modes = ("per_project", "pooled")

    print("### Agreement (rule = recall's fusion; fixed = a=0.3)\n")
    print("| index | split | questions | same first | ...right | one side right | rule takes it | fixed takes it "
          "| rule and fixed differ |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        for name in ("dev", "test"):
            a = agreement(split(observed[mode], name))
            print(f"| {mode} | {name} | {a['questions']} | {a['same_first']} | {a['same_first_right']} | "
                  f"{a['one_side_right']} | {a['rule_right']} | {a['fixed_0.3_right']} | {a['rule_and_fixed_differ']} |")

    print("\n### Paired: the rule against a fixed a=0.3, question by question\n")
    print("| index | split | rule better | rule worse | MRR@10 difference | bootstrap 95% | per-question weight ceiling |")
    print("|---|---|---:|---:|---:|---|---:|")
    for mode in modes:
        for name in ("dev", "test"):
            p = paired(split(observed[mode], name))
            print(f"| {mode} | {name} | {p['better']} | {p['worse']} | {p['diff']:+.3f} | [{p['low']:+.3f}, {p['high']:+.3f}] "
                  f"| {p['ceiling']:.3f} |")

    print("\n### Pooled misses\n")
    print("| split | questions | rule misses the first place | another project's entry first | MRR@10 "
          "| MRR@10, other projects struck out | per-project index MRR@10 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("dev", "test"):
        p = pooled_misses(split(observed["pooled"], name), owner)
        own = mrr(split(observed["per_project"], name), rule)
        print(f"| {name} | {p['questions']} | {p['missed']} | {p['another_project_first']} | {p['mrr']:.3f} "
              f"| {p['mrr_other_projects_struck_out']:.3f} | {own:.3f} |")

    print("\n### The rare-token override\n")
    for mode in modes:
        print(f"- {mode}: {rare_override(observed[mode])}")

    print("\n### The first 150 entries against the 204 written later (per-project indexes, MRR@10)\n")
    print("| ranking | first dev | first test | later dev | later test |")
    print("|---|---:|---:|---:|---:|")
    group: dict[str, list[Observed]] = {}
    for o in observed["per_project"]:
        first = owner[o.query.relevant[0]] in FIRST_PROJECTS if o.query.relevant else o.query.project in FIRST_PROJECTS
        group.setdefault(("first " if first else "later ") + o.query.split, []).append(o)
    for title, ranker in (("lexical", lambda o: rank_lexical(o)[0]), ("cosine alone", lambda o: rank_cosine(o)[0]),
                          ("fixed a=0.3", fixed(0.3)), ("rule", rule)):
        cells = " | ".join(f"{mrr(group[g], ranker):.3f}" for g in ("first dev", "first test", "later dev", "later test"))
        print(f"| {title} | {cells} |")

    print("\n### Variants tried (MRR@10: per project dev / test, pooled dev / test)\n")
    print("| variant | per project dev | per project test | pooled dev | pooled test |")
    print("|---|---:|---:|---:|---:|")
    tried: list[tuple[str, Ranker]] = [("recall's rule (30 + 30 candidates, score / best)", rule)]
    for n in (10, 20, 50, 100):
        tried.append((f"rule, {n} + {n} candidates", lambda o, n=n: variant(o, pool_lexical=n, pool_cosine=n)))
    tried.append(("rule, min-max over the candidates", lambda o: variant(o, scale="minmax")))
    tried.append(("rule, z-scores over the candidates", lambda o: variant(o, scale="z")))
    tried.append(("fixed a=0.3, min-max", lambda o: variant(o, scale="minmax", weight=0.3)))
    tried.append(("reciprocal rank fusion, k=60, a=0.5", lambda o: variant(o, rrf=60, weight=0.5)))
    tried.append(("reciprocal rank fusion, k=10, a=0.3", lambda o: variant(o, rrf=10, weight=0.3)))
    tried.append(("rule + kind hint x1.25 on the semantic side", lambda o: variant(o, kinds=kind, kind_boost=0.25)))
    # Other per-question weights, each the best of a small grid on SQLite's dev questions (both indexes):
    tried.append(("a = 0.45 - 3 * separation (no lexical margin)", weighted(lambda o, r: 0.45 - 3 * r.separation)))
    tried.append(("a = 0.4 + 0.3 * IDF share - 3 * separation",
                  weighted(lambda o, r: 0.4 + 0.3 * idf_share(o) - 3 * r.separation)))
    tried.append(("a = 0.4 + 2 * margin * IDF share - 2 * separation",
                  weighted(lambda o, r: 0.4 + 2 * r.lexical_margin * idf_share(o) - 2 * r.separation)))
    tried.append(("a = 0.4 - 0.1 * separation / spread of the top 30 cosines",
                  weighted(lambda o, r: 0.4 - 0.1 * _separation_in_spreads(o))))
    for title, ranker in tried:
        cells = [f"{mrr(split(observed[m], s), ranker):.3f}" for m in modes for s in ("dev", "test")]
        print(f"| {title} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
