"""Supports (what CI attested of an entry) and contradictions (who refuted it)."""

from __future__ import annotations

from gateway.knowledge.model import ContradictionRecord, Entry, Support
from gateway.store.queries.common import QueryBase, _dump


class SupportQueries(QueryBase):
    async def insert_support(self, entry: Entry, support: Support) -> bool:
        """False when this fingerprint (issuer + source) already supports it."""
        count = await self.tx.run(
            "INSERT INTO supports (entry_seq, issuer, source, attestation_id, at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (entry_seq, issuer, source) DO NOTHING",
            entry.seq,
            support.issuer,
            support.source,
            support.attestation_id,
            support.at,
        )
        if count:
            entry.supports.append(support)
        return bool(count)

    async def support_exists(self, project_id: int, entry_id: str, issuer: str, source: str) -> bool:
        """Whether this fingerprint (issuer + source) already supports this
        entry of this project: the common case of a CI rerun, answered
        without loading the entry."""
        row = await self.tx.one(
            "SELECT 1 AS found FROM supports s JOIN entries e ON e.seq = s.entry_seq "
            "WHERE e.project_id = ? AND e.id = ? AND s.issuer = ? AND s.source = ?",
            project_id,
            entry_id,
            issuer,
            source,
        )
        return row is not None

    async def insert_contradiction(self, entry: Entry, record: ContradictionRecord) -> None:
        await self.tx.run(
            "INSERT INTO contradictions (entry_seq, project_id, by_principal, detail, at, until) VALUES (?, ?, ?, ?, ?, ?)",
            entry.seq,
            entry.project_id,
            record.by,
            _dump(record.detail),
            record.at,
            record.until,
        )
        entry.contradictions.append(record)

    async def demotions_since(self, project_id: int, principal: str, since: float) -> tuple[int, float | None]:
        # The count decides whether one more demotion passes: two refutes at
        # once on two processes must not both see the last free slot.
        return await self._count_since(
            f"demotions:{project_id}:{principal}",
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM contradictions WHERE project_id = ? AND by_principal = ? AND at > ?",
            project_id,
            principal,
            since,
        )
