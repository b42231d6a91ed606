"""SQLite's recall ranking of a question over rows held in Python.

`SqliteFtsIndex._ranked` ranks with FTS5 statements; this is the same
ranking computed from the rows themselves (`gateway.store.bm25`'s rows and
formula), for a project small enough to read whole: PostgreSQL's small
projects and SQLite's projects held in memory (`gateway.store.fts_memory`).
Pure: rows in, (seq, score) out.

The work is per term a row holds, not per term of the question (each
row's lexemes are looked up among the terms, and `bm25.scores` sums over
the terms a row holds), so a long question over a few rows stays cheap.
"""

from __future__ import annotations

from typing import Sequence

from gateway.recall.search import QueryPlan, Ranking, fuse
from gateway.store import bm25


def column_weights(ranking: Ranking) -> dict[str, float]:
    """The ranking's column weights by the rows' column letters (statement A,
    evidence B, kind C, identifier parts D: FTS5's column order)."""
    return {"A": float(ranking.statement_weight), "B": float(ranking.evidence_weight),
            "C": float(ranking.kind_weight), "D": float(ranking.aliases_weight)}


Frequencies = dict[int, dict[bm25.Term, float]]  # row -> its weighted frequency of each term it holds


def frequencies(
    terms: Sequence[bm25.Term | None],
    kind_term: bm25.Term | None,
    rows: Sequence[bm25.Row],
    weights: dict[str, float],
) -> tuple[Frequencies, dict[bm25.Term, int]]:
    """Each row's instances of each term it holds, counted once from the
    rows' positions: its weighted frequency, and per term the rows holding
    it (its IDF, and the MATCH)."""
    by_first: dict[str, list[bm25.Term]] = {}
    for term in {t for t in terms if t is not None} | ({kind_term} if kind_term is not None else set()):
        by_first.setdefault(term.lexemes[0], []).append(term)
    found: Frequencies = {}
    hits: dict[bm25.Term, int] = {}
    for row in rows:
        weighted: dict[bm25.Term, float] = {}
        for lexeme in row.positions:
            for term in by_first.get(lexeme, ()):
                count, f = bm25.instances(term, row, weights)
                if count:
                    weighted[term] = f
                    hits[term] = hits.get(term, 0) + 1
        found[row.seq] = weighted
    return found, hits


def exact_ranking(
    plan: QueryPlan,
    terms: Sequence[bm25.Term | None],
    kind: str | None,
    kind_term: bm25.Term | None,
    rows: Sequence[bm25.Row],
    table_rows: int,
    table_tokens: int,
    kind_rows: int,
    weights: dict[str, float],
    wanted: int,
) -> list[tuple[int, float]]:
    """What `SqliteFtsIndex._ranked` returns on the same rows, best first:
    FTS5's bm25 of the query's phrases (a `kind` filter is one phrase more,
    on the kind column), the agent's words weighing `original_weight` times
    their synonyms; one ranking over every match when they fit in `wanted`,
    else the best `wanted` of the agent's words and of the synonyms apart,
    fused (`gateway.recall.search.fuse`).  `rows`: every row holding one of
    the terms (all kinds: a term's IDF counts them all), with the positions
    of the terms' lexemes; `kind_rows`: the rows of the kind asked for."""
    found, hits = frequencies(terms, kind_term, rows, weights)
    return ranking(plan, terms, kind, kind_term, rows, found, hits, table_rows, table_tokens, kind_rows, wanted)


def ranking(
    plan: QueryPlan,
    terms: Sequence[bm25.Term | None],
    kind: str | None,
    kind_term: bm25.Term | None,
    rows: Sequence[bm25.Row],
    found: Frequencies,
    hits: dict[bm25.Term, int],
    table_rows: int,
    table_tokens: int,
    kind_rows: int,
    wanted: int,
) -> list[tuple[int, float]]:
    """`exact_ranking` once the rows' `frequencies` are known (however they
    were counted: a held table counts a one-word term's from its postings)."""
    weight = max(1, plan.original_weight)
    pairs = list(zip(plan.phrases, terms))
    originals = [t for p, t in pairs if not p.expansion and t is not None]
    expansions = [t for p, t in pairs if p.expansion and t is not None]
    head = [kind_term] if kind_term is not None else []
    hits = dict(hits)
    if kind_term is not None:
        hits[kind_term] = kind_rows  # the kind column's rows, matching or not
    scoped = [r for r in rows if kind is None or r.kind == kind]

    def ranked(phrase_terms: list[bm25.Term], limit: int) -> list[tuple[int, float]]:
        wanted_terms = set(phrase_terms)
        holding = [r for r in scoped if not wanted_terms.isdisjoint(found[r.seq])]
        scored = bm25.scores(head + phrase_terms, holding, found, table_rows, table_tokens, hits)
        return sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:limit]

    every = set(originals) | set(expansions)
    everything = [r for r in scoped if not every.isdisjoint(found[r.seq])]
    # SQLite's choice between one ranking and two: the whole table fits in
    # one answer, or the phrases' own row counts (kind-scoped, summed: a
    # bound on the rows of the question) do.
    if table_rows > wanted:
        scoped_hits: dict[bm25.Term, int] = {}
        for r in scoped:
            for term in found[r.seq]:
                scoped_hits[term] = scoped_hits.get(term, 0) + 1
        counted = sum(scoped_hits.get(t, 0) for _, t in pairs if t is not None)
        if not counted:
            return []
    if table_rows <= wanted or counted <= wanted:
        whole = head + [t for p, t in pairs if t is not None for _ in range(weight if not p.expansion else 1)]
        scored = bm25.scores(whole, everything, found, table_rows, table_tokens, hits)
        best = sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:wanted]
        return [(seq, score / weight) for seq, score in best]
    fused = fuse(ranked(originals, wanted), ranked(expansions, wanted) if expansions else [], weight)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))
