"""The audit trail: every state change of an entry, by whom."""

from __future__ import annotations

from typing import Any

from gateway.store.queries.common import QueryBase, _dump, _load, _where


class AuditQueries(QueryBase):
    async def audit(
        self, project_id: int, now: float, action: str, entry_id: str | None, actor: str, detail: Any = None
    ) -> None:
        await self.tx.run(
            "INSERT INTO audit (project_id, at, action, entry_id, actor, detail) VALUES (?, ?, ?, ?, ?, ?)",
            project_id,
            now,
            action,
            entry_id,
            actor,
            _dump(detail),
        )

    async def audit_rows(
        self,
        project_id: int,
        *,
        entry_id: str | None = None,
        action: str | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        where, args = _where(("project_id = ?", project_id), ("entry_id = ?", entry_id), ("action = ?", action),
                             ("id < ?", before_id))
        rows = await self.tx.all(
            f"SELECT id, at, action, entry_id, actor, detail FROM audit WHERE {where} "
            "ORDER BY id DESC LIMIT ?",
            *args,
            limit,
        )
        for row in rows:
            row["detail"] = _load(row["detail"])
        return rows
