"""The two ways a recall is ranked, on one transaction's queries.

`candidates`: the store's lexical ranking of the question's weighted words
(`gateway.recall.query.plan`), with the kind hints' lift.  `lexical`: those
alone (`RELAYROOM_SEMANTIC_MODEL=off`), their scores made readable by
`fusion.lexical_relevance`.  `fused`: the lexical candidates and the
project's nearest vectors, fused by `fusion.fuse`.  The query's vector (and
its cosines over the cached matrix) is computed before the transaction, on
a worker thread (`SemanticStage.embed_and_rank`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.knowledge.model import Entry
from gateway.recall import fusion
from gateway.recall.query import plan
from gateway.recall.semantic import SHORTLIST, QueryVector, SemanticStage, cosines, nearest, shortlist
from gateway.store.queries import Queries

CANDIDATES = 30  # nearest by meaning, before fusion picks the `limit` best
# Lexical candidates read for the kind hints to reorder; a fused recall hands
# all of them to fusion: in a big project an entry far down by its words may
# still be near by its meaning, and only a candidate of both sides adds both.
HEADROOM = 60
KIND_BOOST = 1.25  # an entry of a kind the question asks for, lifted this much

Hits = list[tuple[int, float]]


def _text(entry: Entry) -> str:
    return f"{entry.statement} {entry.evidence or ''}"


async def candidates(q: Queries, project_id: int, query: str, kind: str | None, limit: int, now: float) -> Hits:
    """The best `limit` (seq, score) of the store's lexical ranking, after the kind hints."""
    shaped = plan(query)
    if shaped.empty:
        return []
    found = await q.lexical(project_id, shaped.terms, kind, max(limit, min(HEADROOM, limit * 3)), now)
    hinted = shaped.hinted_kinds
    scored = [(c.seq, c.score * KIND_BOOST if c.kind in hinted else c.score) for c in found]
    scored.sort(key=lambda item: (-item[1], -item[0]))
    return scored[:limit]


async def lexical(q: Queries, project_id: int, query: str, kind: str | None, limit: int, now: float) -> list[tuple[Entry, float]]:
    hits = await candidates(q, project_id, query, kind, limit, now)
    return _calibrated(query, await _live(q, hits, kind, now))


def _calibrated(query: str, hits: list[tuple[Entry, float]]) -> list[tuple[Entry, float]]:
    if not hits:
        return []
    readings = fusion.read(query, _text(hits[0][0]), [score for _, score in hits[:2]], [], {})
    return _rescored(hits, fusion.lexical_relevance(readings))


async def fused(
    q: Queries,
    stage: SemanticStage,
    query: QueryVector,
    hits: Hits,
    first: Entry | None,
    project_id: int,
    text: str,
    kind: str | None,
    limit: int,
    now: float,
) -> list[tuple[Entry, float]]:
    """`hits`: the lexical stage's best `max(limit, HEADROOM)`, and
    `first` the first one's entry, read just before; `query`: the query's
    vector, and its nearest rows when they were computed with it.  Only the
    entries fusion picks are read, here, in this snapshot."""
    vectors = await stage.project_vectors(q, project_id)
    if vectors is None:  # no vector yet (a new project, or the fill is still running)
        return _calibrated(text, await _live(q, hits[:limit], kind, now))
    if vectors.matrix is None:
        # Held by signs: the shortlist's and the lexical candidates' own
        # vectors, read in this snapshot, give the cosines (with two models,
        # each scaled between the median and the best of the rows read).
        among = set(await asyncio.to_thread(shortlist, vectors, query.vector, kind, CANDIDATES * SHORTLIST))
        lexical = {seq for seq, _ in hits}
        rows = await q.vectors_of(sorted(among | lexical), stage.model_id)
        cosine, top, sure = cosines(query.vector, rows, among, CANDIDATES, lexical, vectors.widths)
    else:
        if query.on is vectors and query.nearest is not None:
            cosine, top, sure, similarity = query.nearest
        else:
            # The matrix changed since (or was not cached): a matrix product
            # over the project's rows, on a worker thread like the model.
            cosine, top, sure, similarity = await asyncio.to_thread(nearest, vectors, query.vector, kind, CANDIDATES)
        for seq, _ in hits:
            if seq not in cosine and seq in vectors.row:
                cosine[seq] = float(similarity[vectors.row[seq]])
    rule = fusion.rule_for(len(vectors.widths))
    readings = fusion.read(
        text, _text(first) if first is not None else None, [score for _, score in hits[:2]], top, vectors.df, rule, sure
    )
    ranked = fusion.fuse(hits, cosine, readings, rule)
    # Each entry's state is checked here, in this snapshot.
    live = (await _live(q, ranked[: limit * 2], kind, now))[:limit]
    return _rescored(live, fusion.relevance(readings, rule))


async def _live(q: Queries, ranked: Hits, kind: str | None, now: float) -> list[tuple[Entry, float]]:
    """The entries of `ranked` that are trusted now (and of `kind`), read in
    this snapshot, in `ranked`'s order: the index holds trusted entries
    only, but recall is the gate's door, so the entry's own state has the last word."""
    found = await q.recalled_entries([seq for seq, _ in ranked]) if ranked else {}
    return [
        (found[seq], score) for seq, score in ranked
        if seq in found and found[seq].effective_state(now) == "trusted" and (kind is None or found[seq].kind == kind)
    ]


def _rescored(hits: list[tuple[Entry, float]], relevance: float) -> list[tuple[Entry, float]]:
    """`hits` with the scores `fusion.scored` gives them for `relevance`."""
    by_seq = {entry.seq: entry for entry, _ in hits}
    return [(by_seq[seq], score) for seq, score in fusion.scored([(e.seq, s) for e, s in hits], relevance)]
