"""What an owner reads about a project's entries beside the entries
themselves: counts by state, the audit ledger a page at a time, one entry's
history and how often recall handed it out.  Read-only; every method checks
the principal's level first, so the doors only render."""

from __future__ import annotations

from typing import Any

from gateway.core.clock import Clock
from gateway.core.cursor import decode_cursor, encode_cursor
from gateway.core.visible import marked, marked_json
from gateway.knowledge.model import Entry, Principal
from gateway.knowledge.permissions import require
from gateway.store.base import Driver
from gateway.store.queries import Queries


class Ledger:
    def __init__(self, driver: Driver, clock: Clock) -> None:
        self.driver = driver
        self.clock = clock

    async def counts(self, principal: Principal) -> dict[str, int]:
        """Entries per state, as they stand now (retired counted from their expiry)."""
        require(principal, "read_audit")
        project_id, now = principal.project.id, self.clock.now()
        counts: dict[str, int] = await self.driver.read(lambda q: q.count_entries(project_id, now))
        return counts

    async def audit_page(
        self, principal: Principal, *, entry_id: str | None = None, action: str | None = None,
        cursor: str | None = None, limit: int = 100,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the audit ledger, newest first: (rows, the next page's
        cursor or None)."""
        require(principal, "read_audit")
        before = decode_cursor(cursor)
        project_id = principal.project.id
        rows: list[dict[str, Any]] = await self.driver.read(
            lambda q: q.audit_rows(project_id, entry_id=entry_id, action=action, before_id=before, limit=limit + 1)
        )
        next_cursor = encode_cursor(rows[limit - 1]["id"]) if len(rows) > limit else None
        return _shown(rows[:limit]), next_cursor

    async def entry_history(self, principal: Principal, entry: Entry, limit: int = 200) -> tuple[list[dict[str, Any]], int, int]:
        """One entry's audit rows (newest first), and how many recalls
        returned it and how many of those it was used in."""
        require(principal, "read_audit")
        project_id = principal.project.id

        async def unit(q: Queries) -> tuple[list[dict[str, Any]], tuple[int, int]]:
            return await q.audit_rows(project_id, entry_id=entry.id, limit=limit), await q.entry_recall_stats(entry.seq)

        rows, (returned, used) = await self.driver.read(unit)
        return _shown(rows), returned, used

    async def playbook_base(self, principal: Principal) -> tuple[str, int]:
        """The owner's hand-written part of RELAYROOM.md and how many entries are trusted now."""
        require(principal, "edit_playbook")
        project_id, now = principal.project.id, self.clock.now()

        async def unit(q: Queries) -> tuple[str, int]:
            return marked(await q.playbook(project_id)), await q.count_trusted(project_id, now)

        base: tuple[str, int] = await self.driver.read(unit)
        return base


def _shown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Audit rows with the agents' words in their details (a contradiction's
    detail, a reason) stored before invisible characters were refused shown
    with a marker for each (gateway.core.visible)."""
    for row in rows:
        row["detail"] = marked_json(row["detail"])
    return rows
