"""The two ways a recall is ranked, on one transaction's queries.

`lexical`: the full-text index alone (the plain install), its scores made
readable by `fusion.lexical_relevance`.  `fused`: the index's candidates and
the project's nearest vectors, fused by `fusion.fuse`.  The query's vector
(and its cosines over the cached matrix) is computed before the transaction,
on a worker thread (`SemanticStage.embed_and_rank`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.knowledge.model import Entry
from gateway.recall import fusion
from gateway.recall.semantic import QueryVector, SemanticStage, nearest

CANDIDATES = 30  # from each side, before fusion picks the `limit` best


def _text(entry: Entry) -> str:
    return f"{entry.statement} {entry.evidence or ''}"


async def lexical(q: Any, project_id: int, query: str, kind: str | None, limit: int, now: float) -> list[tuple[Entry, float]]:
    return _calibrated(query, await q.search(project_id, query, kind, limit, now))


def _calibrated(query: str, hits: list[tuple[Entry, float]]) -> list[tuple[Entry, float]]:
    if not hits:
        return []
    readings = fusion.read(query, _text(hits[0][0]), [score for _, score in hits[:2]], [], {})
    return _rescored(hits, fusion.lexical_relevance(readings))


async def fused(
    q: Any,
    stage: SemanticStage,
    query: QueryVector,
    candidates: tuple[list[tuple[int, float]], Entry | None],
    project_id: int,
    text: str,
    kind: str | None,
    limit: int,
    now: float,
    rule: fusion.FusionRule = fusion.DEFAULT_RULE,
) -> list[tuple[Entry, float]]:
    """`candidates`: the lexical stage's best `max(limit, CANDIDATES)` (seq,
    score) and the first one's entry, read just before (`Queries.candidates`);
    `query`: the query's vector, and its nearest rows when they were
    computed with it (`SemanticStage.embed_and_rank`).  Only the entries
    fusion picks are read, here, in this snapshot."""
    hits, first = candidates
    vectors = await stage.project_vectors(q, project_id)
    if vectors is None:  # no vector yet (a new project, or the fill is still running)
        return _calibrated(text, await _live(q, hits[:limit], kind, now))
    if query.on is vectors and query.nearest is not None:
        cosine, top, similarity = query.nearest
    else:
        # The matrix changed since (or was not cached): a matrix product
        # over the project's rows, about a millisecond at 10k entries, on a
        # worker thread like the model.
        cosine, top, similarity = await asyncio.to_thread(nearest, vectors, query.vector, kind, CANDIDATES)
    rows = vectors.row
    for seq, _ in hits:
        if seq not in cosine and seq in rows:
            cosine[seq] = float(similarity[rows[seq]])
    readings = fusion.read(
        text, _text(first) if first is not None else None, [score for _, score in hits[:2]], top, vectors.df, rule
    )
    ranked = fusion.fuse(hits, cosine, readings, rule)
    # Each entry's state is checked here, in this snapshot, the lexical
    # candidates' with the others.
    live = (await _live(q, ranked[: limit * 2], kind, now))[:limit]
    return _rescored(live, fusion.relevance(readings, rule))


async def _live(q: Any, ranked: list[tuple[int, float]], kind: str | None, now: float) -> list[tuple[Entry, float]]:
    """The entries of `ranked` that are trusted now (and of `kind`), read in
    this snapshot, in `ranked`'s order."""
    found = await q.entries_by_seqs([seq for seq, _ in ranked]) if ranked else {}
    return [
        (found[seq], score) for seq, score in ranked
        if seq in found and found[seq].effective_state(now) == "trusted" and (kind is None or found[seq].kind == kind)
    ]


def _rescored(hits: list[tuple[Entry, float]], relevance: float) -> list[tuple[Entry, float]]:
    """`hits` with the scores `fusion.scored` gives them for `relevance`."""
    by_seq = {entry.seq: entry for entry, _ in hits}
    return [(by_seq[seq], score) for seq, score in fusion.scored([(e.seq, s) for e, s in hits], relevance)]
