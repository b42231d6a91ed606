"""The attestation intake: a verified CI voice becomes a recorded attestation
and, when the check map maps its check, support for entries.

Three doors lead here: an OIDC token (`POST /v1/attestations`, `from_token`),
a Standard Webhooks source (`from_source`), and GitHub's `workflow_run`
webhook, which lives with its provider (`gateway.ci.providers.github_webhook`).
Each ends in one store write unit (`record`) that

1. reserves the replay key (the token's `jti` until it could no longer be
   accepted, the signed run id and attempt, or the `webhook-id`),
2. records the attestation, counted or not (`unmapped_check`,
   `workflow_not_allowed`, `not_success`), and
3. for a counted one, adds one support per mapped entry through
   `Knowledge.apply_support`, which deduplicates on issuer + check and
   promotes in the same transaction.

A refusal raised inside the unit rolls the whole unit back: a refused token
uses up nothing.  CI can only promote: a failure is recorded and demotes
nothing.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from gateway.ci import webhook_signatures as signatures
from gateway.ci.checkmaps.model import CheckRule
from gateway.ci.checkmaps.registry import CheckmapRegistry, no_project
from gateway.ci.oidc.verifier import TokenVerifier
from gateway.ci.providers import workflows
from gateway.ci.providers.webhook import StandardWebhook, source_key
from gateway.ci.providers.workflows import WorkflowRef
from gateway.core.clock import Clock
from gateway.core.config import Config
from gateway.core.errors import BadRequest, Conflict, Forbidden, Invalid, NotFound, Unauthorized
from gateway.core.ids import new_id
from gateway.core.logs import note
from gateway.core.metrics import Metrics
from gateway.core.visible import describe, first_invisible
from gateway.knowledge.model import Support
from gateway.knowledge.service import Knowledge
from gateway.knowledge.settings import SLUG
from gateway.store.base import Driver
from gateway.store.queries.attestations import Recorded, Replay
from gateway.store.queries import Queries

log = logging.getLogger("relayroom.attestations")

OUTCOMES = ("success", "failure", "cancelled", "skipped")
MAX_CHECK = 200
MAX_RUN_URL = 2000


@dataclass(frozen=True)
class Statement:
    """What a CI run says: the request body of 5.1, validated."""

    check: str
    outcome: str
    project: str | None
    run_url: str | None


def read_check(check: Any) -> str:
    """`check` as a check name, or the refusal.  A check name is shown to
    the owner beside the entries it supports: visible text only."""
    if isinstance(check, str) and (found := first_invisible(check)) is not None:
        raise Invalid(f"check holds an invisible character ({describe(*found)}); a check name is text a person "
                      "can read", code="invisible_text", extra={"field": "check"})
    if not isinstance(check, str) or not 1 <= len(check) <= MAX_CHECK or not check.isprintable():
        raise Invalid(f"check must be 1 to {MAX_CHECK} printable characters", code="invalid_check",
                      extra={"field": "check"})
    return check


def read_statement(body: Mapping[str, Any]) -> Statement:
    check = read_check(body.get("check"))
    outcome = body.get("outcome")
    if outcome not in OUTCOMES:
        raise Invalid(f"outcome must be one of {', '.join(OUTCOMES)}", code="invalid_outcome", extra={"field": "outcome"})
    project = body.get("project")
    if project is not None and (not isinstance(project, str) or not SLUG.fullmatch(project)):
        raise Invalid("project must be a project slug", code="invalid_field", extra={"field": "project"})
    run_url = body.get("run_url")
    if run_url is not None and (
        not isinstance(run_url, str) or len(run_url) > MAX_RUN_URL or not run_url.startswith(("https://", "http://"))
    ):
        raise Invalid(f"run_url must be an http(s) URL of at most {MAX_RUN_URL} characters", code="invalid_field",
                      extra={"field": "run_url"})
    return Statement(check=check, outcome=outcome, project=project, run_url=run_url)


def decide(rule: CheckRule | None, outcome: str, workflow: WorkflowRef | None, home: str | None) -> str | None:
    """None when the attestation counts, else the reason it does not."""
    if rule is None:
        return "unmapped_check"
    if rule.workflows is not None and not workflows.names(rule.workflows, workflow, home):
        return "workflow_not_allowed"
    if outcome != "success":
        return "not_success"
    return None


class AttestationIntake:
    def __init__(self, *, config: Config, clock: Clock, driver: Driver, knowledge: Knowledge, metrics: Metrics,
                 registry: CheckmapRegistry, verifier: TokenVerifier,
                 environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.driver = driver
        self.knowledge = knowledge
        self.metrics = metrics
        self.registry = registry
        self.verifier = verifier
        self.environ = os.environ if environ is None else environ
        self._counters: dict[tuple[str, str], Any] = {}

    # -- the doors ------------------------------------------------------------

    async def from_token(self, token: str, statement: Statement) -> dict[str, Any]:
        credential = await self.verifier.verify(token, statement.project)
        result = await self.record(
            project=credential.project,
            issuer=credential.issuer,
            statement=statement,
            workflow=credential.workflow,
            home=credential.home_repository,
            provenance=credential.provenance,
            replay=credential.replay,
        )
        assert result is not None
        return result

    async def from_source(self, source: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, dict[str, Any]]:
        bindings = self.registry.snapshot.bound(source_key(source), StandardWebhook)
        if not bindings:
            raise NotFound(f"no check map binds the webhook source {source[:64]!r}", code="unknown_source")
        keyed: list[tuple[StandardWebhook, bytes]] = []
        for binding in bindings:
            key = signatures.standard_key(self.environ.get(binding.secret_env, ""))
            if key is None:
                log.warning("webhook source %s (%s): %s does not hold a whsec_ secret", source, binding.where(),
                            binding.secret_env)
                continue
            keyed.append((binding, key))
        verdict, index = signatures.standard_verify(
            [key for _, key in keyed],
            headers.get("webhook-id"),
            headers.get("webhook-timestamp"),
            headers.get("webhook-signature"),
            raw,
            self.clock.now(),
        )
        if verdict is signatures.Verdict.STALE:
            raise Unauthorized("webhook-timestamp is more than 5 minutes away from the gateway's clock", code="stale_webhook")
        if verdict is not signatures.Verdict.VALID:
            raise Unauthorized("the webhook signature does not verify: send webhook-id, webhook-timestamp and "
                               "webhook-signature (v1,<base64 HMAC-SHA256>) made with this source's secret",
                               code="invalid_signature")
        signing_key = keyed[index][1]
        verified = [b for b, key in keyed if key == signing_key]
        payload = json_object(raw)
        if payload is None:
            raise BadRequest("the body must be a JSON object", code="malformed_json")
        statement = read_statement(payload)
        binding = _one_project(verified, statement.project)
        message_id = headers.get("webhook-id", "")
        result = await self.record(
            project=binding.project,
            issuer=binding.identity,
            statement=statement,
            workflow=None,
            home=None,
            provenance={"source": source, "webhook_id": message_id},
            replay=Replay(False, binding.identity, f"webhook-id:{message_id}"),
        )
        if result is None:
            return 200, {"recorded": False, "duplicate": True, "reason": "webhook-id already recorded"}
        return 201, result

    # -- the write unit ---------------------------------------------------------

    async def record(
        self,
        *,
        project: str,
        issuer: str,
        statement: Statement,
        workflow: WorkflowRef | None,
        home: str | None,
        provenance: dict[str, Any],
        replay: Replay,
    ) -> dict[str, Any] | None:
        """One write unit; None when a delivery's key says it was seen before
        (a reused token is refused: 409 token_reused)."""
        rule = self.registry.snapshot.rule(project, statement.check)
        reason = decide(rule, statement.outcome, workflow, home)
        now = self.clock.now()
        attestation_id = new_id("at")
        supports = rule.supports if reason is None and rule is not None else ()

        # Most CI runs are reruns: every mapped entry already holds this
        # issuer + check's support, so recording is the replay key and the
        # row, one statement on PostgreSQL.  It writes nothing otherwise.
        async def rerun(q: Queries) -> Recorded:
            found: Recorded = await q.record_rerun(project, replay, supports, attestation_id, issuer, statement.check,
                                                   statement.outcome, reason, provenance, statement.run_url, now)
            return found

        found = await self.driver.write_statement(rerun)
        if found.project_id is None:
            raise no_project(project)
        if found.recorded:
            result: dict[str, Any] | None = _answer(attestation_id, project, issuer, statement.check, reason,
                                                    [{"entry_id": e, "duplicate": True} for e in supports], [])
        elif not found.missing:
            _replayed(replay)
            result = None
        else:
            result = await self.driver.write(self._unit(project, issuer, statement, reason, provenance, replay,
                                                        supports, attestation_id, now))
        if result is not None:
            self._counter(statement.outcome, result["counted"]).inc()
            if result["promoted"]:
                self.metrics.promotions.labels("issuers").inc(len(result["promoted"]))
            note(log, "attestation", project=project, issuer=issuer, check=statement.check[:200],
                 counted=result["counted"])
        return result

    def _unit(self, project: str, issuer: str, statement: Statement, reason: str | None, provenance: dict[str, Any],
              replay: Replay, supports: tuple[str, ...], attestation_id: str, now: float
              ) -> Callable[[Any], Awaitable[dict[str, Any] | None]]:
        """The full write unit, for an attestation that adds supports: the
        replay key, the row, and one support per mapped entry through
        `Knowledge.apply_support` (which may promote), all or nothing."""
        knowledge = self.knowledge

        async def unit(q: Queries) -> dict[str, Any] | None:
            stored_project = await q.project_by_slug(project)
            if stored_project is None:
                raise no_project(project)
            if not await q.reserve(replay, now):
                _replayed(replay)
                return None
            await q.insert_attestation(attestation_id, stored_project.id, issuer, statement.check, statement.outcome,
                                       reason is None, reason, provenance, statement.run_url, now)
            added: list[dict[str, Any]] = []
            promoted: list[str] = []
            support = Support(issuer=issuer, source=statement.check, attestation_id=attestation_id, at=now)
            for entry_id in supports:
                if await q.support_exists(stored_project.id, entry_id, issuer, statement.check):
                    # A rerun: the support is there, nothing can change; skip loading the entry.
                    added.append({"entry_id": entry_id, "duplicate": True})
                    continue
                outcome = await knowledge.apply_support(q, stored_project, entry_id, support, now)
                if outcome is None:
                    continue  # not an entry of this project: never supported
                added.append({"entry_id": outcome.entry_id, "duplicate": outcome.duplicate})
                if outcome.promoted:
                    promoted.append(outcome.entry_id)
            return _answer(attestation_id, project, issuer, statement.check, reason, added, promoted)

        return unit

    def _counter(self, outcome: str, counted: bool) -> Any:
        """The attestation counter child for these labels, looked up once."""
        key = (outcome if outcome in OUTCOMES else "other", "true" if counted else "false")
        child = self._counters.get(key)
        if child is None:
            child = self._counters[key] = self.metrics.attestations.labels(*key)
        return child


def _replayed(replay: Replay) -> None:
    """A taken replay key: a token is refused (raised inside a unit, it undoes
    the unit), a delivery is a duplicate (None)."""
    if replay.token:
        raise Conflict("this token was already used for an attestation; request a fresh token for each attestation",
                       code="token_reused")


def _answer(attestation_id: str, project: str, issuer: str, check: str, reason: str | None,
            supports: list[dict[str, Any]], promoted: list[str]) -> dict[str, Any]:
    answer: dict[str, Any] = {"attestation_id": attestation_id, "project": project, "issuer": issuer, "check": check,
                              "counted": reason is None}
    if reason is not None:
        answer["reason"] = reason
    answer["supports"] = supports
    answer["promoted"] = promoted
    return answer


def _one_project(bindings: list[StandardWebhook], project: str | None) -> StandardWebhook:
    if project is not None:
        mine = [b for b in bindings if b.project == project]
        if not mine:
            log.info("webhook source asked for project %s; its secret serves %s", project,
                     ", ".join(sorted({b.project for b in bindings})))
            raise Forbidden(f"this source's secret is not bound to project {project}", code="project_mismatch")
        return mine[0]
    projects = sorted({b.project for b in bindings})
    if len(projects) > 1:
        raise Invalid(f"this source is bound by several projects ({', '.join(projects)}); name one in the body's "
                      "project field", code="project_required")
    return bindings[0]


def json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
