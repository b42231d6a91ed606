"""Recall's embedding vectors: one row per trusted entry, written with the
trust move (`track_vector` / `untrack_vector`) as a placeholder that
`fill_vectors` replaces once the vector is computed, outside any transaction."""

from __future__ import annotations

from typing import Any

from gateway.store import recall_index
from gateway.store.queries.common import QueryBase


class VectorQueries(QueryBase):
    async def track_vector(self, seq: int, project_id: int) -> None:
        """The entry became trusted: a placeholder the fill job will embed."""
        await self.tx.run(
            "INSERT INTO entry_vectors (seq, project_id) VALUES (?, ?) ON CONFLICT (seq) DO NOTHING", seq, project_id
        )

    async def untrack_vector(self, seq: int) -> None:
        """The entry left trust: its vector goes with it, in the same transaction."""
        await self.tx.run("DELETE FROM entry_vectors WHERE seq = ?", seq)

    async def count_vectors(self, project_id: int, model: str) -> int:
        row = await self.tx.one("SELECT COUNT(*) AS n FROM entry_vectors WHERE project_id = ? AND model = ?", project_id, model)
        return int(row["n"]) if row else 0

    async def project_vectors(self, project_id: int, model: str, after: int, limit: int) -> list[dict[str, Any]]:
        """The project's vectors of `model` past row id `after`, in id order
        (one range of an index), with what the fusion reads of each entry."""
        return await self.tx.all(
            "SELECT v.id, v.seq, e.kind, e.statement, e.evidence, v.vector FROM entry_vectors v JOIN entries e ON e.seq = v.seq "
            "WHERE v.project_id = ? AND v.model = ? AND v.id > ? ORDER BY v.id LIMIT ?",
            project_id, model, after, limit,
        )

    async def vectors_of(self, seqs: list[int], model: str) -> list[dict[str, Any]]:
        marks = ", ".join("?" for _ in seqs) or "NULL"
        return await self.tx.all(f"SELECT seq, vector FROM entry_vectors WHERE seq IN ({marks}) AND model = ?", *seqs, model)

    async def pending_vectors(self, model: str, limit: int) -> list[dict[str, Any]]:
        """Trusted entries whose vector is missing or made by another model."""
        sql = (
            "SELECT v.id, v.seq, v.project_id, e.kind, e.statement, e.evidence FROM entry_vectors v "
            "JOIN entries e ON e.seq = v.seq WHERE {where} ORDER BY v.model, v.id LIMIT ?"
        )
        rows = await self.tx.all(sql.format(where="v.model IS NULL"), limit)
        # Two ranges of the (model, id) index, empty once every row is of
        # `model`: `model <> ?` would read the whole index at every look.
        for other in ("v.model < ?", "v.model > ?"):
            if len(rows) < limit:
                rows += await self.tx.all(sql.format(where=other), model, limit - len(rows))
        return rows

    async def fill_vectors(self, model: str, filled: list[tuple[int, int, int, bytes]]) -> int:
        """Give placeholders (id, seq, project_id) their vector, in place: a
        placeholder a demotion deleted meanwhile stays gone (the two writes
        meet on the row, whichever comes first)."""
        projects: list[int] = []
        for row_id, _, project_id, vector in filled:
            if await self.tx.run("UPDATE entry_vectors SET model = ?, vector = ? WHERE id = ?", model, vector, row_id):
                projects.append(project_id)
        for project_id in sorted(set(projects)):
            await recall_index.bump(self.tx, project_id)  # the project's matrix changed
        return len(projects)
