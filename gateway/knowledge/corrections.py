"""Corrections: an owner rewrites a statement as a new candidate that names
the entry it replaces (`provenance.replaces`).

Nothing trusted changes when the correction is written: the old entry keeps
its state, and the correction is a candidate like any other.  When the
correction becomes trusted, by K issuers or an owner's confirm, the entry it
replaces retires in the same transaction (and, along the chain, any entry
that one replaced), with a `retire` audit row naming the correction.
"""

from __future__ import annotations

from gateway.knowledge import trust
from gateway.knowledge.model import Entry, Project
from gateway.store.queries import Queries


def replaced_id(entry: Entry) -> str | None:
    target = (entry.provenance or {}).get("replaces")
    return target if isinstance(target, str) else None


async def retire_replaced(q: Queries, project: Project, promoted: Entry, actor: str, now: float) -> list[str]:
    """Retire what `promoted` (just made trusted) replaces, following the
    chain of corrections; returns the ids retired.  The chain is bounded and
    never revisits an entry, so a loop written by hand in the store ends."""
    retired: list[str] = []
    seen = {promoted.id}
    target = replaced_id(promoted)
    for _ in range(trust.MAX_REPLACEMENT_CHAIN):
        if target is None or target in seen:
            break
        seen.add(target)
        old = await q.entry(project.id, target, for_update=True)
        if old is None:
            break
        if trust.leaves_trust_when_replaced(old.facts()):
            previous = old.effective_state(now)
            await q.set_state(old, "retired")
            await q.audit(project.id, now, "retire", old.id, actor, {"from": previous, "replaced_by": promoted.id})
            retired.append(old.id)
        target = replaced_id(old)
    return retired
