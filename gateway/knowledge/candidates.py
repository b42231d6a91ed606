"""Writing a candidate: the one place an entry comes into being.

Learn (REST and MCP), extraction from thread messages and approved
reflections all call `write_candidate`, so the rules every new entry obeys
(it starts as a candidate, a live duplicate the author can see is returned
instead, the `learn` audit row is written in the same transaction) hold for
every path by construction.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from gateway.core.ids import new_id
from gateway.knowledge import trust
from gateway.knowledge.model import Entry, Project
from gateway.store.queries import Queries


async def write_candidate(
    q: Queries,
    project: Project,
    *,
    author: str,
    kind: str,
    statement: str,
    evidence: str | None,
    via: str,
    now: float,
    expires_at: float | None = None,
    provenance: dict[str, Any] | None = None,
    before_insert: Callable[[], Awaitable[None]] | None = None,
) -> tuple[Entry, bool]:
    """The one way an entry comes into being: as a candidate, with its `learn`
    audit row, unless `author` can already see a live entry saying the same
    thing (then that entry is returned with duplicate=True).  Learn,
    extraction and approved reflections all come through here."""
    norm = trust.normalise_statement(statement)
    existing = await q.live_duplicate(project.id, norm, author, now)
    if existing is not None:
        return existing, True
    if before_insert is not None:
        await before_insert()
    entry = Entry(
        seq=0,
        id=new_id("kn"),
        project_id=project.id,
        project_slug=project.slug,
        kind=kind,
        statement=statement,
        evidence=evidence,
        state="candidate",  # every path in is a candidate, by design
        created_at=now,
        created_by=author,
        created_via=via,
        expires_at=expires_at,
        promoted_at=None,
        promoted_by=None,
        provenance=provenance,
    )
    stored = await q.insert_entry(entry, norm)
    detail: dict[str, Any] = {"kind": kind, "via": via}
    for key in ("proposal_id", "replaces"):
        if provenance and key in provenance:
            detail[key] = provenance[key]
    await q.audit(project.id, now, "learn", stored.id, author, detail)
    return stored, False
