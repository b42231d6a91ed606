"""What every domain module of the store's SQL shares: the row shapes
(`_project`, `_entry`), the effective-state filters, small helpers, and
`QueryBase` (the transaction and the cross-process locks)."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from gateway.core import jsonio
from gateway.knowledge.model import Entry, Project, ProjectSettings
from gateway.store.base import Tx
from gateway.store.dialect import DIALECTS
from gateway.store.recall_index import index_for


def _dump(value: Any) -> str | None:
    return None if value is None else jsonio.dumps_text(value, sort_keys=True)


def _where(*conditions: tuple[str, Any]) -> tuple[str, list[Any]]:
    """AND together the conditions whose value is given (not None)."""
    kept = [(sql, value) for sql, value in conditions if value is not None]
    return " AND ".join(sql for sql, _ in kept), [value for _, value in kept]


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# An entry's columns (and its project's slug), named as `Entry`'s fields.
ENTRY_FIELDS = ("seq", "id", "project_id", "kind", "statement", "evidence", "state", "created_at", "created_by",
                "created_via", "expires_at", "promoted_at", "promoted_by", "provenance", "project_slug")
ENTRY_COLUMNS = ", ".join(f"e.{name}" for name in ENTRY_FIELDS[:-1]) + ", p.slug AS project_slug"


def _project(row: dict[str, Any]) -> Project:
    settings = ProjectSettings(**{f.name: row[f.name] for f in fields(ProjectSettings)})  # columns of the same names
    return Project(id=row["id"], slug=row["slug"], created_at=row["created_at"], settings=settings)


def _entry(row: dict[str, Any]) -> Entry:
    fields = {name: row[name] for name in ENTRY_FIELDS}
    fields["provenance"] = _load(fields["provenance"])
    return Entry(**fields)


# Effective-state filters: an expired candidate or trusted entry reads as
# retired before the sweep writes it down.
STATE_FILTERS = {
    "candidate": "(e.state = 'candidate' AND (e.expires_at IS NULL OR e.expires_at > ?))",
    "trusted": "(e.state = 'trusted' AND (e.expires_at IS NULL OR e.expires_at > ?))",
    # The cast gives PostgreSQL the parameter's type; it is unused here but
    # keeps one `now` argument per filter.
    "contradicted": "(e.state = 'contradicted' AND CAST(? AS DOUBLE PRECISION) IS NOT NULL)",
    "retired": "(e.state = 'retired' OR (e.state IN ('candidate', 'trusted') AND e.expires_at <= ?))",
}


class QueryBase:
    """What every domain's queries share: the transaction, the recall index,
    and the cross-process locks (`serialize`) a count-then-decide unit takes."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.index = index_for(tx)
        self.dialect = DIALECTS[tx.dialect]

    async def serialize(self, key: str) -> None:
        """Hold a lock named `key` until this write transaction ends.

        For a unit that counts rows and then decides (a rate limit, "is this
        statement already stored"): on PostgreSQL two processes could both
        count before either inserts, so they take an advisory transaction
        lock on the key first.  SQLite needs nothing: its writes are one at a
        time (`BEGIN IMMEDIATE`), across processes too."""
        if self.dialect.advisory_lock is not None:
            await self.tx.one(self.dialect.advisory_lock, key)

    async def _entries(self, where: str, *args: Any) -> list[Entry]:
        """The entries `WHERE {where}` selects, without their supports and contradictions."""
        sql = f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id WHERE {where}"
        return [_entry(r) for r in await self.tx.all(sql, *args)]

    async def _count_since(self, lock: str | None, sql: str, *args: Any) -> tuple[int, float | None]:
        """`sql`'s count `n` and its `oldest` time, with the lock named `lock`
        held (`serialize`) until the transaction ends: the count decides.
        No lock (None) for a pre-check in a read, which the write repeats."""
        if lock is not None:
            await self.serialize(lock)
        row = await self.tx.one(sql, *args)
        return (int(row["n"]), row["oldest"]) if row else (0, None)
