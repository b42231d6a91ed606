"""Check maps published by a project's repository, and the generation every
process polls to notice a change of the maps in force.

A publication is a row; its `state` says what became of it:

    in_force     the project's map in force (at most one per project)
    pending      waits for the owner (at most one per project)
    superseded   was in force; a newer map took its place
    replaced     was pending; a newer publication took its place
    rejected     the owner said no
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.ids import new_id
from gateway.store.queries.common import _dump, _load
from gateway.store.queries.meta import MetaQueries
from gateway.store.schema import SET_META

PUBLISHED_STATES = ("in_force", "pending", "superseded", "replaced", "rejected")
GENERATION_KEY = "checkmaps_generation"
PUBLISHED = ("SELECT c.id, c.project_id, p.slug AS project, c.source, c.content, c.sha256, c.state, c.published_at, "
             "c.run, c.decided_at, c.decided_by FROM published_checkmaps c JOIN projects p ON p.id = c.project_id")


@dataclass(frozen=True)
class PublishedRow:
    id: int
    project_id: int
    project: str
    source: str  # the file's path in the repository
    content: str
    sha256: str
    state: str
    published_at: float
    run: dict[str, Any]  # the run that published it (Binding.run_record)
    decided_at: float | None
    decided_by: str | None


def _published(row: dict[str, Any]) -> PublishedRow:
    return PublishedRow(**{**row, "run": _load(row["run"]) or {}})


class CheckmapQueries(MetaQueries):
    async def checkmap_generation(self) -> str:
        return await self.meta_get(GENERATION_KEY) or ""

    async def new_checkmap_generation(self) -> None:
        """Tell every process that a map in force changed (they poll the value)."""
        await self.tx.run(SET_META, GENERATION_KEY, new_id("gen"))

    async def published_checkmap(self, project_id: int, state: str) -> PublishedRow | None:
        """The project's map in that state (`in_force` or `pending`), if any."""
        row = await self.tx.one(f"{PUBLISHED} WHERE c.project_id = ? AND c.state = ?", project_id, state)
        return _published(row) if row else None

    async def published_in_force(self) -> list[PublishedRow]:
        """Every project's published map in force."""
        rows = await self.tx.all(f"{PUBLISHED} WHERE c.state = 'in_force' ORDER BY p.slug")
        return [_published(r) for r in rows]

    async def insert_published(self, project_id: int, source: str, content: str, sha256: str, state: str,
                               run: dict[str, Any], now: float) -> None:
        await self.tx.run("INSERT INTO published_checkmaps (project_id, source, content, sha256, state, published_at, "
                          "run) VALUES (?, ?, ?, ?, ?, ?, ?)", project_id, source, content, sha256, state, now, _dump(run))

    async def set_published_state(self, row_id: int, state: str, now: float, by: str) -> None:
        await self.tx.run("UPDATE published_checkmaps SET state = ?, decided_at = ?, decided_by = ? WHERE id = ?",
                          state, now, by, row_id)
