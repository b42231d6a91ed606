"""The knowledge use cases: learn, read, confirm, refute, report, support, sweep.

Each is one store transaction in which the facts are read, `gateway.knowledge.trust`
says what the rule allows, and the move and its audit row are written
together.  REST, MCP, the dashboard and the attestation intake all call these
functions: one rule, several doors.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from gateway.knowledge import trust
from gateway.core.clock import HOUR, Clock, to_rfc3339
from gateway.core.cursor import decode_cursor, encode_cursor
from gateway.core.errors import Conflict, GatewayError, Invalid, NotFound, RateLimited
from gateway.core.ids import new_id
from gateway.core.metrics import Metrics
from gateway.knowledge.candidates import write_candidate
from gateway.knowledge.corrections import retire_replaced
from gateway.knowledge.model import ContradictionRecord, Entry, Principal, Project, Support
from gateway.knowledge.inputs import (
    MAX_EVENT_TYPE,
    MAX_EVIDENCE,
    MAX_STATEMENT,
    optional_text,
    refuse_invisible_json,
    validate_detail,
    validate_expiry,
    validate_kind,
    validate_page_limit,
    validate_state,
    validate_text,
)
from gateway.knowledge.permissions import require
from gateway.store.base import Driver
from gateway.store.queries import Queries

@dataclass(frozen=True)
class SupportOutcome:
    entry_id: str
    duplicate: bool
    promoted: bool


BULK_ACTIONS = ("confirm", "refute", "retire")
MAX_BULK = 100


@dataclass(frozen=True)
class BulkResult:
    """One entry's outcome in a move on several entries: the entry as it is
    after the move, or the refusal it met (the other entries still move)."""

    entry_id: str
    entry: Entry | None = None
    error: GatewayError | None = None


@dataclass(frozen=True)
class WriteLimits:
    """Per-principal hourly budgets (docs/security.md, Limits; abuse limits, distinct from
    the demotion budget of the trust rule), counted from the store so that
    every process sees the same spend:

    - learn_per_hour: candidates created by any path of the principal's own
      (learn through REST or MCP, extraction from its thread messages, its
      reflection proposals);
    - events_per_hour: events, and thread messages (counted apart);
    - recalls_per_hour: recalls and recorded `recall_used` calls."""

    learn_per_hour: int = 600
    events_per_hour: int = 1200
    recalls_per_hour: int = 3600


def over_budget(what: str, principal: str, limit: int, count: int, oldest: float | None, now: float) -> RateLimited | None:
    if count < limit:
        return None
    retry = trust.rate_limit_retry_after(oldest, now)
    return RateLimited(
        f"{principal} has reached {limit} {what} per hour; retry in {retry} s", code="rate_limited", retry_after=retry
    )


async def candidate_refusal(q: Queries, project_id: int, principal: str, limit: int, now: float) -> RateLimited | None:
    """The refusal when `principal` has used its hourly candidate budget (its
    candidates by every path, counted under the budget lock), else None."""
    count, oldest = await q.count_candidates_since(project_id, principal, now - HOUR)
    return over_budget("candidates", principal, limit, count, oldest, now)


class Knowledge:
    def __init__(self, driver: Driver, clock: Clock, metrics: Metrics, limits: WriteLimits | None = None) -> None:
        self.driver = driver
        self.clock = clock
        # Counted only after the commit, so a rolled-back move is never counted.
        self.metrics = metrics
        self.limits = limits or WriteLimits()

    # -- writing candidates ---------------------------------------------------

    async def learn(
        self,
        principal: Principal,
        kind: str,
        statement: str,
        evidence: str | None = None,
        *,
        ttl_days: float | None = None,
        expires_at: float | None = None,
    ) -> tuple[Entry, bool]:
        """Write a candidate, always.  Returns (entry, duplicate).  The
        arguments are checked here whatever their annotations say: the doors
        pass what the client sent."""
        require(principal, "learn")
        checked_kind = validate_kind(kind)
        checked_statement = validate_text(statement, "statement", MAX_STATEMENT)
        checked_evidence = optional_text(evidence, "evidence", MAX_EVIDENCE)
        now = self.clock.now()
        expires_at = validate_expiry(ttl_days, expires_at, now)
        project = principal.project

        async def unit(q: Queries) -> tuple[Entry, bool]:
            async def within_budget() -> None:
                refusal = await candidate_refusal(q, project.id, principal.name, self.limits.learn_per_hour, now)
                if refusal is not None:
                    raise refusal

            return await write_candidate(
                q,
                project,
                author=principal.name,
                kind=checked_kind,
                statement=checked_statement,
                evidence=checked_evidence,
                via="learn",
                expires_at=expires_at,
                now=now,
                before_insert=within_budget,
            )

        return await self.driver.write(unit)

    # -- reading ------------------------------------------------------------

    async def get(self, principal: Principal, entry_id: str) -> Entry:
        now = self.clock.now()
        entry = await self.driver.read(lambda q: q.entry(principal.project.id, entry_id))
        if entry is None or not entry.visible_to(principal, now):
            raise NotFound(f"no entry {entry_id!r} in project {principal.project.slug}", code="entry_not_found")
        return entry

    async def list(
        self,
        principal: Principal,
        *,
        state: str | tuple[str, ...] | None = None,
        kind: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        text: str | None = None,
    ) -> tuple[list[Entry], str | None]:
        """A page of entries, newest first, in `state` (one, or any of several; every state when None)."""
        states = (state,) if isinstance(state, str) else tuple(state or ())
        for one in states:
            validate_state(one)
        if kind is not None:
            validate_kind(kind)
        validate_page_limit(limit)
        before = decode_cursor(cursor)
        now = self.clock.now()
        visible_to = None if principal.is_owner else principal.name
        entries = await self.driver.read(
            lambda q: q.list_entries(
                principal.project.id,
                now,
                states=states,
                kind=kind,
                visible_to=visible_to,
                text=text,
                before_seq=before,
                limit=limit + 1,
            )
        )
        next_cursor = encode_cursor(entries[limit - 1].seq) if len(entries) > limit else None
        return entries[:limit], next_cursor

    # -- owner moves ----------------------------------------------------------

    async def confirm(self, principal: Principal, entry_id: str, *, bulk: bool = False) -> Entry:
        require(principal, "confirm")
        project = principal.project
        now = self.clock.now()

        async def unit(q: Queries) -> Entry:
            entry = await self._entry_for_update(q, project, entry_id)
            decision = trust.on_confirm(entry.facts(), now)
            if decision.verdict is trust.Verdict.BLOCKED:
                assert decision.blocked_until is not None
                live = trust.live_contradictions([c.to_rule() for c in entry.contradictions], now)
                by = sorted({c.by for c in live})
                raise Conflict(
                    f"a contradiction by {', '.join(by)} is inside the window; a confirm works from "
                    f"{to_rfc3339(decision.blocked_until)}",
                    code="blocked_by_contradiction",
                    extra={"blocked_until": to_rfc3339(decision.blocked_until), "contradicted_by": by},
                )
            if decision.verdict is trust.Verdict.NOT_CONFIRMABLE:
                raise Conflict(decision.reason, code="not_confirmable")
            previous = entry.effective_state(now)
            await q.set_state(entry, "trusted", promoted_at=now, promoted_by=f"owner:{principal.name}")
            detail: dict[str, Any] = {"from": previous}
            if bulk:
                detail["bulk"] = True
            await q.audit(project.id, now, "override", entry.id, principal.name, detail)
            await retire_replaced(q, project, entry, principal.name, now)
            return entry

        confirmed = await self.driver.write(unit)
        self.metrics.promotions.labels("owner").inc()
        return confirmed

    async def refute(self, principal: Principal, entry_id: str, reason: str, *, bulk: bool = False) -> Entry:
        require(principal, "refute")
        reason = validate_text(reason, "reason", MAX_EVIDENCE)
        project = principal.project
        now = self.clock.now()
        detail: dict[str, Any] = {"reason": reason, "via": "refute"}
        if bulk:
            detail["bulk"] = True

        async def unit(q: Queries) -> tuple[Entry, _ContradictOutcome]:
            entry = await self._entry_for_update(q, project, entry_id)
            outcome = await self._contradict(q, project, entry, principal.name, detail, now)
            return entry, outcome

        entry, outcome = await self.driver.write(unit)
        outcome.raise_if_refused()
        self._count_contradiction(outcome.effect)
        return entry

    async def retire(self, principal: Principal, entry_id: str, reason: str | None = None, *, bulk: bool = False) -> Entry:
        """Retire an entry now: it leaves recall and the review queue in this
        commit, for good (retired is final).  Audited as `retire`."""
        require(principal, "retire")
        reason = optional_text(reason, "reason", MAX_EVIDENCE)
        project = principal.project
        now = self.clock.now()

        async def unit(q: Queries) -> Entry:
            entry = await self._entry_for_update(q, project, entry_id)
            decision = trust.on_retire(entry.facts(), now)
            if decision.verdict is trust.Verdict.RETIRED:
                raise Conflict(decision.reason, code="entry_retired")
            previous = entry.effective_state(now)
            await q.set_state(entry, "retired")
            detail: dict[str, Any] = {"from": previous, "via": "owner"}
            if reason is not None:
                detail["reason"] = reason
            if bulk:
                detail["bulk"] = True
            await q.audit(project.id, now, "retire", entry.id, principal.name, detail)
            return entry

        return await self.driver.write(unit)

    async def set_expiry(
        self,
        principal: Principal,
        entry_id: str,
        *,
        ttl_days: float | None = None,
        expires_at: float | None = None,
        clear: bool = False,
    ) -> Entry:
        """Give a live entry an expiry (days from now or a moment in the
        future), or none (`clear`).  The state does not change now: the entry
        reads as retired from that instant, as any expiring entry.  Audited as
        `retire` with the old and new expiry, since it schedules one."""
        require(principal, "set_expiry")
        now = self.clock.now()
        if clear:
            if ttl_days is not None or expires_at is not None:
                raise Invalid("give ttl_days, expires_at, or null to clear the expiry, not several", code="invalid_field")
            new_expiry = None
        else:
            new_expiry = validate_expiry(ttl_days, expires_at, now)
            if new_expiry is None:
                raise Invalid("give ttl_days or expires_at (or expires_at: null to clear the expiry)", code="missing_field")
        project = principal.project

        async def unit(q: Queries) -> Entry:
            entry = await self._entry_for_update(q, project, entry_id)
            decision = trust.on_owner_edit(entry.facts(), now)
            if decision.verdict is trust.Verdict.RETIRED:
                raise Conflict(decision.reason, code="entry_retired")
            previous = entry.expires_at
            await q.set_expiry(entry, new_expiry)
            await q.audit(
                project.id,
                now,
                "retire",
                entry.id,
                principal.name,
                {"via": "expiry", "expires_at": to_rfc3339(new_expiry), "previous_expires_at": to_rfc3339(previous)},
            )
            return entry

        return await self.driver.write(unit)

    async def correct(
        self,
        principal: Principal,
        entry_id: str,
        statement: str,
        *,
        kind: str | None = None,
        evidence: str | None = None,
        reason: str | None = None,
    ) -> Entry:
        """Write a correction of an entry: a NEW candidate naming the entry it
        replaces.  The old entry keeps its state until the correction becomes
        trusted through the gate (K issuers or an owner's confirm); then it
        retires in that same commit (`gateway.knowledge.corrections`)."""
        require(principal, "correct")
        checked_statement = validate_text(statement, "statement", MAX_STATEMENT)
        checked_kind = validate_kind(kind) if kind is not None else None
        checked_evidence = optional_text(evidence, "evidence", MAX_EVIDENCE)
        checked_reason = optional_text(reason, "reason", MAX_EVIDENCE)
        project = principal.project
        now = self.clock.now()

        async def unit(q: Queries) -> Entry:
            old = await self._entry_for_update(q, project, entry_id)
            decision = trust.on_owner_edit(old.facts(), now)
            if decision.verdict is trust.Verdict.RETIRED:
                raise Conflict(decision.reason, code="entry_retired")
            if trust.normalise_statement(checked_statement) == trust.normalise_statement(old.statement):
                raise Invalid("a correction must say something else than the entry it replaces", code="unchanged_statement")

            async def within_budget() -> None:
                refusal = await candidate_refusal(q, project.id, principal.name, self.limits.learn_per_hour, now)
                if refusal is not None:
                    raise refusal

            provenance: dict[str, Any] = {"replaces": old.id}
            if checked_reason is not None:
                provenance["reason"] = checked_reason
            entry, duplicate = await write_candidate(
                q,
                project,
                author=principal.name,
                kind=checked_kind or old.kind,
                statement=checked_statement,
                evidence=checked_evidence,
                via="learn",
                now=now,
                provenance=provenance,
                before_insert=within_budget,
            )
            if duplicate:
                raise Conflict(
                    f"entry {entry.id} already says this ({entry.effective_state(now)}); retire {old.id} instead, "
                    "or confirm that entry",
                    code="statement_exists",
                    extra={"entry_id": entry.id},
                )
            return entry

        return await self.driver.write(unit)

    async def bulk(
        self, principal: Principal, action: str, entry_ids: object, reason: str | None = None
    ) -> builtins.list[BulkResult]:
        """One move on several entries.  Each entry moves in its own
        transaction with its own audit row (marked `bulk`), through the same
        function as a single move, so the trust rule is asked for each: a
        blocked confirm or a spent demotion budget refuses that entry and the
        others still move.  The level is checked once, before anything."""
        require(principal, "bulk")
        if action not in BULK_ACTIONS:
            raise Invalid(f"action must be one of {', '.join(BULK_ACTIONS)}", code="invalid_field")
        require(principal, action)
        if (
            not isinstance(entry_ids, list)
            or not entry_ids
            or len(entry_ids) > MAX_BULK
            or not all(isinstance(i, str) and 0 < len(i) <= 100 for i in entry_ids)
        ):
            raise Invalid(f"entry_ids must be a list of 1 to {MAX_BULK} entry ids", code="invalid_field")
        if action == "refute":
            reason = validate_text(reason, "reason", MAX_EVIDENCE)
        else:
            reason = optional_text(reason, "reason", MAX_EVIDENCE)
        results: builtins.list[BulkResult] = []
        for entry_id in dict.fromkeys(entry_ids):  # once each, in the order given
            try:
                if action == "confirm":
                    entry = await self.confirm(principal, entry_id, bulk=True)
                elif action == "refute":
                    assert reason is not None
                    entry = await self.refute(principal, entry_id, reason, bulk=True)
                else:
                    entry = await self.retire(principal, entry_id, reason, bulk=True)
            except GatewayError as exc:
                results.append(BulkResult(entry_id, error=exc))
            else:
                results.append(BulkResult(entry_id, entry=entry))
        return results

    async def corrections_of(self, principal: Principal, entry_id: str) -> builtins.list[Entry]:
        """The corrections written for an entry (owner's view), newest first."""
        require(principal, "correct")
        return await self.driver.read(lambda q: q.corrections_of(principal.project.id, entry_id))

    # -- agents' events -------------------------------------------------------

    async def post_event(self, principal: Principal, type_: str, detail: dict[str, Any]) -> tuple[str, str]:
        require(principal, "post_event")
        type_ = validate_text(type_, "type", MAX_EVENT_TYPE)
        detail = validate_detail(detail)
        if type_ == "error":
            # An error event's detail is what the owner reads beside the entry it
            # contradicts, and what agents reading that entry are served.
            refuse_invisible_json(detail, "detail")
        project = principal.project
        now = self.clock.now()
        target = detail.get("contradicts") if type_ == "error" else None
        if type_ == "error" and "contradicts" in detail and not isinstance(target, str):
            raise Invalid("detail.contradicts must be an entry id (a string)", code="invalid_field")
        event_id = new_id("ev")

        async def unit(q: Queries) -> tuple[str, _ContradictOutcome | None]:
            count, oldest = await q.count_events_since(project.id, principal.name, now - HOUR)
            refusal = over_budget("events", principal.name, self.limits.events_per_hour, count, oldest, now)
            if refusal is not None:
                raise refusal
            if target is None:
                await q.insert_event(event_id, project.id, principal.name, type_, detail, "none", now)
                return "none", None
            entry = await q.entry(project.id, target, for_update=True)
            if entry is None or not self._may_contradict(entry, principal, now):
                raise NotFound(f"no entry {target!r} in project {project.slug}", code="entry_not_found")
            outcome = await self._contradict(q, project, entry, principal.name, detail, now)
            if outcome.effect is not None:
                await q.insert_event(event_id, project.id, principal.name, type_, detail, outcome.effect, now)
            return outcome.effect or "none", outcome

        effect, outcome = await self.driver.write(unit)
        if outcome is not None:
            outcome.raise_if_refused()
        self._count_contradiction(effect)
        return event_id, effect

    def _count_contradiction(self, effect: str | None) -> None:
        if effect == "contradicted":
            self.metrics.contradictions.inc()

    @staticmethod
    def _may_contradict(entry: Entry, principal: Principal, now: float) -> bool:
        if principal.is_owner or entry.created_by == principal.name:
            return True
        return entry.effective_state(now) in ("trusted", "contradicted")

    # -- CI support (called inside the attestation's transaction) --------------

    async def apply_support(
        self, q: Queries, project: Project, entry_id: str, support: Support, now: float
    ) -> SupportOutcome | None:
        """Record one support and promote if it completes K.  None when the
        entry is not in this project (a check map naming a foreign or
        unknown id never supports it)."""
        entry = await q.entry(project.id, entry_id, for_update=True)
        if entry is None:
            return None
        if not await q.insert_support(entry, support):
            return SupportOutcome(entry.id, duplicate=True, promoted=False)
        await q.audit(
            project.id,
            now,
            "support",
            entry.id,
            support.issuer,
            {"source": support.source, "attestation_id": support.attestation_id},
        )
        decision = trust.on_support(entry.facts(), project.settings.trust(), now)
        if decision.verdict is not trust.Verdict.PROMOTE:
            return SupportOutcome(entry.id, duplicate=False, promoted=False)
        await q.set_state(entry, "trusted", promoted_at=now, promoted_by="issuers")
        await q.audit(project.id, now, "promote", entry.id, "issuers", {"issuers": sorted(entry.issuers())})
        await retire_replaced(q, project, entry, "issuers", now)
        return SupportOutcome(entry.id, duplicate=False, promoted=True)

    # -- expiry ---------------------------------------------------------------

    async def sweep(self) -> int:
        """Write down `retired` for every entry whose expiry has passed.
        Returns how many entries were retired.  (The CI side's replay
        records are pruned by `gateway.ci.replay`, which the hub's sweep
        runs next to this.)"""
        total = 0
        while True:
            now = self.clock.now()

            async def unit(q: Queries) -> int:
                entries = await q.expired_live_entries(now)
                for entry in entries:
                    previous = entry.state
                    await q.set_state(entry, "retired")
                    await q.audit(entry.project_id, now, "retire", entry.id, "sweep", {"from": previous})
                return len(entries)

            done = await self.driver.write(unit)
            total += done
            if done == 0:
                break
        return total

    # -- helpers --------------------------------------------------------------

    async def _entry_for_update(self, q: Queries, project: Project, entry_id: str) -> Entry:
        entry = await q.entry(project.id, entry_id, for_update=True)
        if entry is None:
            raise NotFound(f"no entry {entry_id!r} in project {project.slug}", code="entry_not_found")
        return entry

    async def _contradict(
        self, q: Queries, project: Project, entry: Entry, by: str, detail: Any, now: float
    ) -> "_ContradictOutcome":
        settings = project.settings.trust()
        count, oldest = await q.demotions_since(project.id, by, now - HOUR)
        decision = trust.on_contradict(entry.facts(), by, now, settings, count)
        if decision.verdict is trust.Verdict.RETIRED:
            return _ContradictOutcome(None, Conflict(decision.reason, code="entry_retired"))
        if decision.verdict is trust.Verdict.DUPLICATE:
            return _ContradictOutcome("duplicate", None)
        if decision.verdict is trust.Verdict.RATE_LIMITED:
            if await q.mark_rate_limited(project.id, by, "demotion", now):
                await q.audit(project.id, now, "rate_limited", entry.id, by, {"limit_per_hour": settings.demotions_per_hour})
            retry = trust.rate_limit_retry_after(oldest, now)
            return _ContradictOutcome(
                None,
                RateLimited(
                    f"{by} has used its {settings.demotions_per_hour} demotions for this hour; retry in {retry} s",
                    code="rate_limited",
                    retry_after=retry,
                ),
            )
        record = ContradictionRecord(by=by, detail=detail, at=now, until=trust.contradiction_until(now, settings))
        previous = entry.effective_state(now)
        await q.insert_contradiction(entry, record)
        if entry.state in ("candidate", "trusted"):
            await q.set_state(entry, "contradicted")
        await q.audit(project.id, now, "contradict", entry.id, by, {"from": previous, "detail": detail})
        return _ContradictOutcome("contradicted", None)


@dataclass
class _ContradictOutcome:
    """A refused contradiction is returned, not raised, so that what the
    refusal writes (the `rate_limited` ledger row) is committed."""

    effect: str | None
    refusal: Exception | None

    def raise_if_refused(self) -> None:
        if self.refusal is not None:
            raise self.refusal
