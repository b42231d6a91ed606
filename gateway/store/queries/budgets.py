"""Events and the per-principal budgets counted over them (writes, reads, rate-limit marks)."""

from __future__ import annotations

from typing import Any

from gateway.core.clock import HOUR
from gateway.store.queries.common import QueryBase, _dump


class BudgetQueries(QueryBase):
    async def insert_event(
        self, event_id: str, project_id: int, principal: str, type_: str, detail: Any, effect: str, now: float
    ) -> None:
        await self.tx.run(
            "INSERT INTO events (id, project_id, principal, type, detail, effect, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            event_id,
            project_id,
            principal,
            type_,
            _dump(detail),
            effect,
            now,
        )

    async def count_candidates_since(
        self, project_id: int, principal: str, since: float, *, lock: bool = True
    ) -> tuple[int, float | None]:
        """The candidates `principal` created since `since` by any path of
        its own (learn, extraction from its thread messages, its proposals;
        an approved reflection is its proposal, not a second candidate), and
        the oldest of them.  With `lock`, learn, threads and proposals
        serialise on one key, so two paths at once cannot both take the last
        free slot."""
        return await self._count_since(
            f"budget:candidates:{project_id}:{principal}" if lock else None,
            "SELECT SUM(n) AS n, MIN(oldest) AS oldest FROM ("
            "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM entries "
            "WHERE project_id = ? AND created_by = ? AND created_at > ? AND created_via IN ('learn', 'extraction') "
            "UNION ALL SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM proposals "
            "WHERE project_id = ? AND proposed_by = ? AND created_at > ?) x",
            project_id,
            principal,
            since,
            project_id,
            principal,
            since,
        )

    async def count_reads_since(
        self, project_id: int, principal: str, since: float, *, lock: bool = False
    ) -> tuple[int, float | None]:
        """`principal`'s recalls and recorded uses since `since` (the read
        budget), and the oldest of them.  Two index ranges: its recalls, and
        the project's uses of the hour joined to their recall's principal
        (a use belongs to the principal of the recall it answers)."""
        return await self._count_since(
            f"budget:reads:{project_id}:{principal}" if lock else None,
            "SELECT SUM(n) AS n, MIN(oldest) AS oldest FROM ("
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM recalls WHERE project_id = ? AND principal = ? AND at > ? "
            "UNION ALL SELECT COUNT(*) AS n, MIN(ru.at) AS oldest FROM recall_uses ru "
            "JOIN recalls r ON r.seq = ru.recall_seq "
            "WHERE ru.project_id = ? AND ru.at > ? AND r.principal = ?) x",
            project_id,
            principal,
            since,
            project_id,
            since,
            principal,
        )

    async def last_recall_id(self) -> int:
        """The largest recall id in this snapshot (0 for none): with
        `Dialect.ordered_ids`, every recall recorded later has a larger one."""
        row = await self.tx.one("SELECT MAX(seq) AS top FROM recalls")
        return int(row["top"] or 0) if row else 0

    async def count_reads_after(
        self, project_id: int, principal: str, after: int, recalls_since: float, uses_since: float
    ) -> tuple[int, int, int]:
        """`principal`'s recalls with an id above `after` and a moment after
        `recalls_since`, its recorded uses since `uses_since`, and the
        largest recall id now.  Only where `Dialect.ordered_ids` holds: then
        the recalls above `after` are those committed since `after` was
        read, and none is counted twice.  The recalls are read from the
        principal's own index, its entries since `recalls_since` (each
        carries its id): a handful for an agent checking at every recall."""
        row = await self.tx.one(
            "SELECT top, (SELECT COUNT(*) FROM recalls "
            "WHERE project_id = ? AND principal = ? AND at > ? AND seq > ?) AS recalls, "
            "(SELECT COUNT(*) FROM recall_uses ru JOIN recalls r ON r.seq = ru.recall_seq "
            "WHERE ru.project_id = ? AND ru.at > ? AND r.principal = ?) AS uses "
            "FROM (SELECT COALESCE(MAX(seq), 0) AS top FROM recalls)",
            project_id,
            principal,
            recalls_since,
            after,
            project_id,
            uses_since,
            principal,
        )
        assert row is not None  # an aggregate always answers one row
        return int(row["recalls"]), int(row["uses"]), int(row["top"])

    async def count_events_since(self, project_id: int, principal: str, since: float) -> tuple[int, float | None]:
        return await self._count_since(
            f"budget:events:{project_id}:{principal}",
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM events WHERE project_id = ? AND principal = ? AND at > ?",
            project_id,
            principal,
            since,
        )

    async def mark_rate_limited(self, project_id: int, principal: str, kind: str, now: float) -> bool:
        """True the first time in this clock hour: one ledger row per principal per hour."""
        return bool(
            await self.tx.run(
                "INSERT INTO rate_limit_marks (project_id, principal, kind, hour) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                project_id,
                principal,
                kind,
                int(now // HOUR),
            )
        )
