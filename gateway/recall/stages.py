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
    by_seq = {entry.seq: entry for entry, _ in hits}
    ranked = fusion.scored([(entry.seq, score) for entry, score in hits], fusion.lexical_relevance(readings))
    return [(by_seq[seq], score) for seq, score in ranked]



async def fused(
    q: Any,
    stage: SemanticStage,
    query: QueryVector,
    hits: list[tuple[Entry, float]],
    project_id: int,
    text: str,
    kind: str | None,
    limit: int,
    now: float,
    rule: fusion.FusionRule = fusion.DEFAULT_RULE,
) -> list[tuple[Entry, float]]:
    """`hits`: the lexical stage's best `max(limit, CANDIDATES)`, read just
    before; `query`: the query's vector, and its nearest rows when they were
    computed with it (`SemanticStage.embed_and_rank`)."""
    vectors = await stage.project_vectors(q, project_id)
    if vectors is None:  # no vector yet (a new project, or the fill is still running)
        return _calibrated(text, hits[:limit])
    if query.on is vectors and query.nearest is not None:
        cosine, top, similarity = query.nearest
    else:
        # The matrix changed since (or was not cached): a matrix product
        # over the project's rows, about a millisecond at 10k entries, on a
        # worker thread like the model.
        cosine, top, similarity = await asyncio.to_thread(nearest, vectors, query.vector, kind, CANDIDATES)
    rows = vectors.row
    for entry, _ in hits:
        if entry.seq not in cosine and entry.seq in rows:
            cosine[entry.seq] = float(similarity[rows[entry.seq]])
    readings = fusion.read(
        text, _text(hits[0][0]) if hits else None, [score for _, score in hits[:2]], top, vectors.df, rule
    )
    ranked = fusion.fuse([(entry.seq, score) for entry, score in hits], cosine, readings, rule)
    # The lexical candidates were read a moment ago: their state is checked
    # again here with the others, in this snapshot.
    found = {}
    wanted = [seq for seq, _ in ranked[: limit * 2]]
    if wanted:
        found.update(await q.entries_by_seqs(wanted))
    live = [
        (seq, score) for seq, score in ranked
        if seq in found and found[seq].effective_state(now) == "trusted" and (kind is None or found[seq].kind == kind)
    ][:limit]
    return [(found[seq], score) for seq, score in fusion.scored(live, fusion.relevance(readings, rule))]
