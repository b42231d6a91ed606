"""GitHub Actions (github.com and GitHub Enterprise Server) tokens.

Identity is the immutable `repository_id` (and `repository_owner_id` when
the binding names it): a repository deleted and re-created under the same
name, or a look-alike after a rename, has another id.  Then the run must be
on a listed ref, from a listed workflow (`job_workflow_ref`, so a reusable
workflow is named as the workflow that actually ran), and not a
`pull_request_target` run unless the binding allows that event by name.
"""

from __future__ import annotations

from typing import Any

from gateway.checkmaps.model import Binding
from gateway.errors import Forbidden
from gateway.oidc import workflows
from gateway.oidc.claims import id_claim, mismatch, ref_listed, str_claim

NAME = "github-actions"
REQUIRED = ("repository", "repository_id", "repository_owner_id", "ref", "sha", "job_workflow_ref", "event_name",
            "run_id", "run_attempt")
GATED_EVENTS = ("pull_request_target",)
PROVENANCE = ("repository", "repository_id", "repository_owner_id", "ref", "sha", "workflow", "workflow_ref",
              "job_workflow_ref", "run_id", "run_number", "run_attempt", "event_name", "actor", "environment")


def identifies(binding: Binding, claims: dict[str, Any]) -> bool:
    if id_claim(claims, "repository_id") != binding.repository_id:
        return False
    return binding.repository_owner_id is None or id_claim(claims, "repository_owner_id") == binding.repository_owner_id


def identity_mismatch(bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
    carried_repo = id_claim(claims, "repository_id")
    same_repo = [b for b in bindings if b.repository_id == carried_repo]
    if same_repo:
        b = same_repo[0]
        return mismatch("repository_owner_id", f"{b.repository_owner_id}", id_claim(claims, "repository_owner_id"),
                        b.where())
    expected = ", ".join(f"{b.repository_id} ({b.repository or 'unnamed'})" for b in bindings[:5])
    return mismatch("repository_id", f"one of {expected}",
                    f"{carried_repo} ({str_claim(claims, 'repository') or '?'})", bindings[0].where())


def authorize(binding: Binding, claims: dict[str, Any]) -> None:
    event = str_claim(claims, "event_name")
    if event in GATED_EVENTS and event not in binding.allow_events:
        raise Forbidden(
            f"event_name: runs triggered by {event} execute with the base repository's identity and are refused; "
            f"add allow_events: [{event}] to the binding at {binding.where()} if this workflow is safe",
            code="event_not_allowed",
        )
    ref = str_claim(claims, "ref")
    if not ref_listed(binding.refs, ref):
        raise mismatch("ref", f"one of {', '.join(binding.refs or ())}", ref, binding.where())
    if binding.workflows is not None and not workflows.names(binding.workflows, workflow_of(claims), home(claims)):
        raise mismatch("job_workflow_ref", f"one of {', '.join(binding.workflows)}", claims.get("job_workflow_ref"),
                       binding.where())


def workflow_of(claims: dict[str, Any]) -> workflows.WorkflowRef | None:
    value = str_claim(claims, "job_workflow_ref")
    return workflows.parse_github(value) if value else None


def home(claims: dict[str, Any]) -> str | None:
    return str_claim(claims, "repository")


def provenance(claims: dict[str, Any]) -> dict[str, Any]:
    out = {name: claims[name] for name in PROVENANCE if isinstance(claims.get(name), (str, int))}
    out["commit"] = claims.get("sha")
    return out
