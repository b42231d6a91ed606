"""The owner's proposals queue (rows as dicts; gateway.knowledge.proposals shapes them)."""

from __future__ import annotations

from typing import Any

from gateway.store.queries.common import QueryBase, _where


class ProposalQueries(QueryBase):
    async def insert_proposal(
        self,
        proposal_id: str,
        project_id: int,
        kind: str,
        statement: str,
        rationale: str | None,
        proposed_by: str,
        now: float,
    ) -> dict[str, Any]:
        row = await self.tx.one(
            "INSERT INTO proposals (id, project_id, kind, statement, rationale, proposed_by, state, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?) RETURNING *",
            proposal_id,
            project_id,
            kind,
            statement,
            rationale,
            proposed_by,
            now,
        )
        assert row is not None
        return row

    async def proposal(self, project_id: int, proposal_id: str, *, for_update: bool = False) -> dict[str, Any] | None:
        sql = "SELECT * FROM proposals WHERE project_id = ? AND id = ?"
        if for_update:
            sql += self.dialect.lock_rows()
        return await self.tx.one(sql, project_id, proposal_id)

    async def list_proposals(
        self, project_id: int, *, state: str | None = None, before_seq: int | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        where, args = _where(("project_id = ?", project_id), ("state = ?", state), ("seq < ?", before_seq))
        return await self.tx.all(f"SELECT * FROM proposals WHERE {where} ORDER BY seq DESC LIMIT ?", *args, limit)

    async def count_proposals(self, project_id: int) -> dict[str, int]:
        rows = await self.tx.all(
            "SELECT state, COUNT(*) AS n FROM proposals WHERE project_id = ? GROUP BY state", project_id
        )
        return {r["state"]: int(r["n"]) for r in rows}

    async def decide_proposal(
        self, seq: int, state: str, now: float, decided_by: str, reason: str | None, entry_id: str | None
    ) -> bool:
        """False when the proposal was decided already (only `pending` moves)."""
        return bool(
            await self.tx.run(
                "UPDATE proposals SET state = ?, decided_at = ?, decided_by = ?, reason = ?, entry_id = ? "
                "WHERE seq = ? AND state = 'pending'",
                state,
                now,
                decided_by,
                reason,
                entry_id,
                seq,
            )
        )
