"""Reflection proposals: an agent suggests an entry, an owner decides.

An agent that looks back on its work may propose a statement with its
rationale.  A proposal is not an entry: it waits, pending, until an owner
approves it (which registers a *candidate*, `created_via: reflection`, never a
trusted entry: approval says "worth considering", not "true") or rejects it
with a reason.  A proposal is decided once; each decision writes its audit row
(`approve_proposal`, `reject_proposal`) in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from gateway.core.clock import Clock, to_rfc3339
from gateway.core.cursor import decode_cursor, encode_cursor
from gateway.core.errors import Conflict, Invalid, NotFound
from gateway.core.ids import new_id
from gateway.core.visible import marked
from gateway.knowledge.candidates import write_candidate
from gateway.knowledge.service import WriteLimits, candidate_refusal
from gateway.knowledge.inputs import MAX_EVIDENCE, MAX_STATEMENT, validate_kind, validate_page_limit, validate_text
from gateway.knowledge.model import Entry, Principal
from gateway.knowledge.permissions import require
from gateway.store.base import Driver
from gateway.store.queries import Queries

PROPOSAL_STATES = ("pending", "approved", "rejected")


@dataclass(frozen=True)
class Proposal:
    seq: int
    id: str
    project_slug: str
    kind: str
    statement: str
    rationale: str | None
    proposed_by: str
    state: str
    created_at: float
    decided_at: float | None
    decided_by: str | None
    reason: str | None
    entry_id: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any], project_slug: str) -> "Proposal":
        # Text stored before invisible characters were refused is read with
        # each of them as its marker, as an Entry's is: the owner reviews
        # what an approval writes, and approving writes what the owner saw.
        return cls(
            seq=int(row["seq"]),
            id=row["id"],
            project_slug=project_slug,
            kind=row["kind"],
            statement=marked(row["statement"]),
            rationale=None if row["rationale"] is None else marked(row["rationale"]),
            proposed_by=row["proposed_by"],
            state=row["state"],
            created_at=row["created_at"],
            decided_at=row["decided_at"],
            decided_by=row["decided_by"],
            reason=None if row["reason"] is None else marked(row["reason"]),
            entry_id=row["entry_id"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project_slug,
            "kind": self.kind,
            "statement": self.statement,
            "rationale": self.rationale,
            "proposed_by": self.proposed_by,
            "state": self.state,
            "created_at": to_rfc3339(self.created_at),
            "decided_at": to_rfc3339(self.decided_at),
            "decided_by": self.decided_by,
            "reason": self.reason,
            "entry_id": self.entry_id,
        }


class Proposals:
    def __init__(self, driver: Driver, clock: Clock, limits: Callable[[], WriteLimits] = WriteLimits) -> None:
        self.driver = driver
        self.clock = clock
        self.limits = limits  # read per call: the hub's budgets as they are now

    async def propose(self, principal: Principal, kind: str, statement: str, rationale: str) -> Proposal:
        require(principal, "propose")
        kind = validate_kind(kind)
        statement = validate_text(statement, "statement", MAX_STATEMENT)
        rationale = validate_text(rationale, "rationale", MAX_EVIDENCE)
        project = principal.project
        now = self.clock.now()
        proposal_id = new_id("pr")

        limit = self.limits().learn_per_hour

        async def unit(q: Queries) -> dict[str, Any]:
            # A proposal is a candidate in waiting: it spends the proposer's
            # candidate budget (learn's), so proposals cannot flood the queue.
            refusal = await candidate_refusal(q, project.id, principal.name, limit, now)
            if refusal is not None:
                raise refusal
            return await q.insert_proposal(proposal_id, project.id, kind, statement, rationale, principal.name, now)

        return Proposal.from_row(await self.driver.write(unit), project.slug)

    async def list(
        self, principal: Principal, *, state: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[Proposal], str | None]:
        require(principal, "list_proposals")
        if state is not None and state not in PROPOSAL_STATES:
            raise Invalid(f"state must be one of {', '.join(PROPOSAL_STATES)}", code="invalid_state")
        validate_page_limit(limit)
        before = decode_cursor(cursor)
        project = principal.project
        rows = await self.driver.read(
            lambda q: q.list_proposals(project.id, state=state, before_seq=before, limit=limit + 1)
        )
        proposals = [Proposal.from_row(r, project.slug) for r in rows]
        next_cursor = encode_cursor(proposals[limit - 1].seq) if len(proposals) > limit else None
        return proposals[:limit], next_cursor

    async def counts(self, principal: Principal) -> dict[str, int]:
        require(principal, "list_proposals")
        counts = await self.driver.read(lambda q: q.count_proposals(principal.project.id))
        return {state: counts.get(state, 0) for state in PROPOSAL_STATES}

    async def approve(self, principal: Principal, proposal_id: Any) -> tuple[Entry, bool]:
        """Register the proposal as a candidate written by its proposer.

        Returns (entry, duplicate): as with learn, a statement equal to a live
        entry the proposer can see links the proposal to that entry instead
        of writing the same fact twice."""
        require(principal, "approve_proposal")
        project = principal.project
        now = self.clock.now()

        async def unit(q: Queries) -> tuple[Entry, bool]:
            proposal = await self._pending(q, principal, proposal_id)
            entry, duplicate = await write_candidate(
                q,
                project,
                author=proposal.proposed_by,
                kind=proposal.kind,
                statement=proposal.statement,
                evidence=proposal.rationale,
                via="reflection",
                now=now,
                provenance={"proposal_id": proposal.id, "approved_by": principal.name},
            )
            await q.decide_proposal(proposal.seq, "approved", now, principal.name, None, entry.id)
            detail: dict[str, Any] = {"proposal_id": proposal.id}
            if duplicate:
                detail["duplicate"] = True
            await q.audit(project.id, now, "approve_proposal", entry.id, principal.name, detail)
            return entry, duplicate

        return await self.driver.write(unit)

    async def reject(self, principal: Principal, proposal_id: Any, reason: Any) -> Proposal:
        require(principal, "reject_proposal")
        reason = validate_text(reason, "reason", MAX_EVIDENCE)
        project = principal.project
        now = self.clock.now()

        async def unit(q: Queries) -> Proposal:
            proposal = await self._pending(q, principal, proposal_id)
            await q.decide_proposal(proposal.seq, "rejected", now, principal.name, reason, None)
            await q.audit(
                project.id, now, "reject_proposal", None, principal.name, {"proposal_id": proposal.id, "reason": reason}
            )
            # What the UPDATE wrote, without reading the row back.
            return replace(proposal, state="rejected", decided_at=now, decided_by=principal.name, reason=reason)

        return await self.driver.write(unit)

    async def _pending(self, q: Queries, principal: Principal, proposal_id: Any) -> Proposal:
        project = principal.project
        row = None
        if isinstance(proposal_id, str) and len(proposal_id) <= 100:
            row = await q.proposal(project.id, proposal_id, for_update=True)
        if row is None:
            raise NotFound(f"no proposal {proposal_id!r} in project {project.slug}", code="proposal_not_found")
        proposal = Proposal.from_row(row, project.slug)
        if proposal.state != "pending":
            raise Conflict(
                f"proposal {proposal.id} was already {proposal.state} by {proposal.decided_by}",
                code="proposal_decided",
                extra={"state": proposal.state},
            )
        return proposal
