"""Recall's embedding vectors: one row per trusted entry (schema version 4).

The row set follows trust inside the transaction that moves an entry
(`track` / `untrack`, called by `EntryQueries.set_state` and the import),
while the vector itself is computed outside any transaction and written by
`fill_vectors` in place of the placeholder row.  Readers see only the rows
that carry a vector of the model they run.
"""

from __future__ import annotations

from typing import Any

from gateway.store import recall_index
from gateway.store.queries.common import QueryBase


async def track(tx: Any, seq: int, project_id: int) -> None:
    """The entry became trusted: a placeholder the fill job will embed."""
    await tx.run(
        "INSERT INTO entry_vectors (seq, project_id) VALUES (?, ?) ON CONFLICT (seq) DO NOTHING", seq, project_id
    )


async def untrack(tx: Any, seq: int) -> None:
    """The entry left trust: its vector goes with it, in the same transaction."""
    await tx.run("DELETE FROM entry_vectors WHERE seq = ?", seq)


class VectorQueries(QueryBase):
    async def track_vector(self, seq: int, project_id: int) -> None:
        """`track`, for a door that makes entries trusted without `set_state` (the import)."""
        await track(self.tx, seq, project_id)

    async def project_vectors(self, project_id: int, model: str) -> list[dict[str, Any]]:
        """Every vector of the project, with what the fusion reads of its entry."""
        return await self.tx.all(
            "SELECT v.seq, e.kind, e.statement, e.evidence, v.vector FROM entry_vectors v "
            "JOIN entries e ON e.seq = v.seq WHERE v.project_id = ? AND v.model = ? ORDER BY v.seq",
            project_id,
            model,
        )

    async def pending_vectors(self, model: str, limit: int) -> list[dict[str, Any]]:
        """Trusted entries whose vector is missing or made by another model."""
        sql = (
            "SELECT v.id, v.seq, v.project_id, e.kind, e.statement, e.evidence FROM entry_vectors v "
            "JOIN entries e ON e.seq = v.seq WHERE {where} ORDER BY v.id LIMIT ?"
        )
        rows = await self.tx.all(sql.format(where="v.model IS NULL"), limit)
        if len(rows) < limit:
            rows += await self.tx.all(sql.format(where="v.model <> ?"), model, limit - len(rows))
        return rows

    async def fill_vectors(self, model: str, filled: list[tuple[int, int, int, bytes]]) -> int:
        """Replace placeholders (id, seq, project_id) by rows with a vector.
        A placeholder deleted meanwhile (the entry left trust) stays gone."""
        written = 0
        projects: set[int] = set()
        for row_id, seq, project_id, vector in filled:
            # On PostgreSQL, lock the entry first: a demotion updates that row
            # before it deletes the vector, so the two cannot interleave (its
            # delete would otherwise miss the row this inserts).
            await self.tx.one("SELECT seq FROM entries WHERE seq = ?" + self.dialect.lock_rows(), seq)
            if await self.tx.run("DELETE FROM entry_vectors WHERE id = ?", row_id):
                await self.tx.run(
                    "INSERT INTO entry_vectors (seq, project_id, model, vector) VALUES (?, ?, ?, ?)",
                    seq,
                    project_id,
                    model,
                    vector,
                )
                written += 1
                projects.add(project_id)
        for project_id in sorted(projects):
            await recall_index.bump(self.tx, project_id)  # the project's matrix changed
        return written
