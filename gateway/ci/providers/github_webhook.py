"""GitHub's webhook door, `POST /v1/webhooks/github`: a signed `workflow_run`
delivery becomes an attestation of the binding of its repository.

The delivery's repository id and host (`X-GitHub-Enterprise-Host`, else
github.com) find the bindings; `X-Hub-Signature-256` must verify under the
secret of one of them (its `webhook_secret_env`, or the hub-wide GitHub App
secret when it opted in with `github_app: true`).  The run is judged by the
same policy as an OIDC token (`GitHubActions.refusal`) and recorded through
the intake's write unit, its replay key the signed run id and attempt.

GitHub marks a hook failing on any answer but 2xx, so a delivery signed
under any secret the hub holds for GitHub that records nothing (another
event, an unbound repository, a run that may not vote, a field missing)
answers 200 with its reason.  Refused only: a signature no such secret
verifies (401), a body that is not a JSON object (400); a body over 1 MiB
is refused before it is read (413).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

from gateway.ci import webhook_signatures as signatures
from gateway.ci.intake import MAX_RUN_URL, AttestationIntake, Statement, json_object, read_check
from gateway.ci.providers.claims import Refusal, object_id
from gateway.ci.providers.github import GITHUB_HOST, GitHubActions, delivery_key, run_from_workflow_run
from gateway.core.errors import BadRequest, Invalid, NotFound, Unauthorized
from gateway.store.queries.attestations import Replay

log = logging.getLogger("relayroom.attestations")

MIN_WEBHOOK_SECRET = 16  # characters; GitHub's guidance is a long random string


class GitHubWebhooks:
    """The door; the intake holds the configuration and the environment it reads."""

    def __init__(self, intake: AttestationIntake) -> None:
        self.intake = intake

    async def deliver(self, headers: Mapping[str, str], raw: bytes) -> tuple[int, dict[str, Any]]:
        snapshot = self.intake.registry.snapshot
        hub_secret = _reveal(self.intake.config.github_webhook_secret)
        own = [b for b in snapshot.bindings_of(GitHubActions) if b.webhook_secret_env]
        if not hub_secret and not own:
            raise NotFound("GitHub webhooks are not configured on this gateway (set RELAYROOM_GITHUB_WEBHOOK_SECRET or "
                           "webhook_secret_env on a github-actions binding)", code="not_found")
        payload = json_object(raw)
        repo_id = object_id(payload.get("repository")) if payload else None
        candidates = snapshot.bound(delivery_key(delivery_host(headers), repo_id), GitHubActions) if repo_id else []
        signature = headers.get("x-hub-signature-256")
        verified = [b for b in candidates if any(signatures.github_valid(secret, raw, signature)
                                                 for secret in self._secrets(b, hub_secret))]
        # Not signed for this repository's bindings: it may still be a delivery
        # of a hook the hub knows (an organisation's ping, a repository no
        # binding takes), answered and never recorded.  Checked only then: a
        # counted delivery pays for one HMAC.
        if not verified and not await self._signed_for_github(raw, signature, hub_secret, own):
            raise Unauthorized("X-Hub-Signature-256 does not verify with any GitHub webhook secret of this gateway "
                               "(the webhook_secret_env of the repository's binding, or the hub-wide GitHub App "
                               "secret)", code="invalid_signature")
        if payload is None:
            raise BadRequest("the webhook body is not a JSON object: set the webhook's content type to "
                             "application/json", code="malformed_json")
        event = headers.get("x-github-event", "")
        if event == "ping":
            return 200, {"event": "ping", "recorded": False}
        if event in ("check_run", "check_suite"):
            return 200, {"event": event, "recorded": False,
                         "reason": "check runs cannot vote: any job holding a GITHUB_TOKEN can create one"}
        if event != "workflow_run":
            return 200, {"event": event[:40], "recorded": False, "reason": "event_ignored"}
        run = payload.get("workflow_run")
        if not isinstance(run, dict):
            return 200, {"event": event, "recorded": False, "reason": "not_a_workflow_run_payload"}
        if payload.get("action") != "completed":
            return 200, {"event": event, "recorded": False, "reason": "action_not_completed"}
        if not verified:
            if not candidates:
                reason = "repository_not_bound"
            elif any(b.webhook_secret_env for b in candidates):
                reason = "not_signed_with_the_bindings_secret"
            else:  # signed with the hub-wide secret, and no binding opted in with github_app: true
                reason = "github_app_not_enabled"
            return 200, {"event": event, "recorded": False, "reason": reason}
        return await self._workflow_run(payload, run, verified)

    async def _workflow_run(self, payload: dict[str, Any], run: dict[str, Any], verified: list[GitHubActions]
                            ) -> tuple[int, dict[str, Any]]:
        run_id, attempt = object_id(run), object_id({"id": run.get("run_attempt")})
        name, conclusion = run.get("name"), run.get("conclusion")
        if run_id is None or attempt is None or not isinstance(conclusion, str) or not conclusion:
            return 200, {"event": "workflow_run", "recorded": False, "reason": "incomplete_workflow_run"}
        if len(conclusion) > 40 or not conclusion.isprintable():
            return 200, {"event": "workflow_run", "recorded": False, "reason": "invalid_outcome"}
        try:
            check = read_check(name)
        except Invalid as problem:
            # GitHub's own example payloads carry an empty name: nothing to record, nothing to refuse.
            return 200, {"event": "workflow_run", "recorded": False, "reason": problem.code, "detail": problem.message}
        statement = Statement(check, conclusion, None, _text(run.get("html_url"), MAX_RUN_URL))
        facts = run_from_workflow_run(payload, run)
        key = f"workflow_run:{run_id}:{attempt}"
        recorded: list[dict[str, Any]] = []
        refusals: list[Refusal] = []
        duplicates = 0
        seen_projects: set[str] = set()
        for binding in verified:
            if binding.project in seen_projects:
                continue
            refusal = binding.refusal(facts)
            if refusal is not None:
                refusals.append(refusal)
                continue
            seen_projects.add(binding.project)
            try:
                result = await self.intake.record(
                    project=binding.project,
                    issuer=binding.identity,
                    statement=statement,
                    workflow=facts.workflow,
                    home=facts.home,
                    provenance={
                        "via": "workflow_run webhook",
                        "repository": facts.home,
                        "repository_id": binding.repository_id,
                        "commit": _text(run.get("head_sha"), 200),
                        "workflow": _text(run.get("path"), 500),
                        "head_branch": _text(run.get("head_branch"), 500),
                        "event_name": facts.event,
                        "run_id": run_id,
                        "run_attempt": attempt,
                    },
                    replay=Replay(False, binding.identity, key),
                )
            except NotFound as missing:  # the map names a project this gateway lacks
                refusals.append(Refusal(missing.code, "project", missing.message))
                continue
            if result is None:
                duplicates += 1
            else:
                recorded.append(result)
        if recorded:
            return 201, {"event": "workflow_run", "recorded": True, "attestations": recorded}
        if duplicates:
            return 200, {"event": "workflow_run", "recorded": False, "duplicate": True,
                         "reason": "this run attempt was already recorded"}
        if refusals:
            return 200, {"event": "workflow_run", "recorded": False, "reason": refusals[0].code,
                         "detail": refusals[0].message}
        return 200, {"event": "workflow_run", "recorded": False, "reason": "not_bound"}

    # -- secrets ------------------------------------------------------------------------

    def _secrets(self, binding: GitHubActions, hub_secret: str | None) -> list[str]:
        """The secrets whose signature speaks for `binding`: its own, and the
        hub-wide GitHub App secret only when it opted in with github_app: true."""
        secrets = []
        if binding.webhook_secret_env:
            own = self._binding_secret(binding)
            if own:
                secrets.append(own)
        if binding.github_app and hub_secret:
            secrets.append(hub_secret)
        return secrets

    async def _signed_for_github(self, raw: bytes, signature: str | None, hub_secret: str | None,
                                 bindings: list[GitHubActions]) -> bool:
        """Whether the signature verifies under any secret the hub holds for
        GitHub.  Each distinct secret costs an HMAC of the body, off the event loop."""
        if signature is None:
            return False
        secrets = {secret for b in bindings if (secret := self._binding_secret(b, warn=False))}
        if hub_secret:
            secrets.add(hub_secret)
        return await asyncio.to_thread(lambda: any(signatures.github_valid(s, raw, signature) for s in secrets))

    def _binding_secret(self, binding: GitHubActions, *, warn: bool = True) -> str | None:
        value = self.intake.environ.get(binding.webhook_secret_env or "")
        if not warn:
            return value if value and len(value) >= MIN_WEBHOOK_SECRET else None
        if not value:
            log.warning("binding %s names webhook_secret_env %s, which is not set", binding.where(),
                        binding.webhook_secret_env)
            return None
        if len(value) < MIN_WEBHOOK_SECRET:
            # A variable that holds something short (HOME, a port, a name) is not
            # a secret: whoever guesses it would sign deliveries.
            log.warning("binding %s: webhook_secret_env %s holds fewer than %d characters; it is not used as a "
                        "secret", binding.where(), binding.webhook_secret_env, MIN_WEBHOOK_SECRET)
            return None
        return value


def delivery_host(headers: Mapping[str, str]) -> str:
    """The GitHub host a delivery comes from: GitHub Enterprise Server names
    itself in X-GitHub-Enterprise-Host, github.com sends no such header.  The
    header is set by the sender whose secret signs the body, so an id
    delivered by github.com never reaches a GitHub Enterprise Server binding."""
    value = headers.get("x-github-enterprise-host")
    if value is None:
        return GITHUB_HOST
    return value.strip().lower()[:300]


def _text(value: Any, limit: int) -> str | None:
    """A delivery's field kept as provenance: a string of at most `limit` characters, or nothing."""
    return value if isinstance(value, str) and len(value) <= limit else None


def _reveal(secret: Any) -> str | None:
    return secret.reveal() if secret else None
