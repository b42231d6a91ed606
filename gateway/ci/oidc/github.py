"""GitHub Actions (github.com and GitHub Enterprise Server) runs.

Identity is the immutable `repository_id` (and `repository_owner_id` when
the binding names it): a repository deleted and re-created under the same
name, or a look-alike after a rename, has another id.

Which runs may vote is one policy, `refusal`, over the run facts that both
doors build (`run_from_claims` for an OIDC token, `run_from_workflow_run`
for a signed webhook): a run votes only when the code that ran is the code
of a listed ref (docs/ci-attestations.md, which runs vote).  That holds for `push`, `schedule` and
`workflow_dispatch`.  A `pull_request` run builds a merge commit whose
workflow file the pull request wrote, whatever its head branch is called;
`pull_request_target`, `workflow_run`, `issue_comment`, `merge_group` and
the like run with a base ref but may build code that is not on it.  Those
vote only when the binding lifts them by name under `allow_events`.
"""

from __future__ import annotations

from typing import Any

from gateway.ci.checkmaps.model import GITHUB_VOTING_EVENTS, Binding
from gateway.core.errors import Forbidden
from gateway.ci.oidc import workflows
from gateway.ci.oidc.claims import (
    Refusal,
    RunFacts,
    id_claim,
    mismatch,
    mismatched,
    not_bound,
    object_id,
    ref_listed,
    ref_type_fits,
    shown,
    str_claim,
)

NAME = "github-actions"
REQUIRED = ("repository", "repository_id", "repository_owner_id", "ref", "sha", "job_workflow_ref", "event_name",
            "run_id", "run_attempt")
# The events whose run is the code of its ref: pushed to it, scheduled on
# the default branch, or dispatched on a chosen ref by someone with write access.
VOTING_EVENTS = GITHUB_VOTING_EVENTS
PROVENANCE = ("repository", "repository_id", "repository_owner_id", "ref", "ref_type", "sha", "workflow",
              "workflow_ref", "job_workflow_ref", "run_id", "run_number", "run_attempt", "event_name", "actor",
              "environment")


def identifies(binding: Binding, claims: dict[str, Any]) -> bool:
    if id_claim(claims, "repository_id") != binding.repository_id:
        return False
    return binding.repository_owner_id is None or id_claim(claims, "repository_owner_id") == binding.repository_owner_id


def identity_mismatch(bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
    """Only a token of a bound repository hears what its binding expects."""
    carried_repo = id_claim(claims, "repository_id")
    same_repo = [b for b in bindings if b.repository_id == carried_repo]
    if same_repo:
        b = same_repo[0]
        return mismatch("repository_owner_id", f"{b.repository_owner_id}", id_claim(claims, "repository_owner_id"),
                        b.where())
    return not_bound("repository_id", carried_repo, "repository")


def run_from_claims(claims: dict[str, Any]) -> RunFacts:
    return RunFacts(
        event=str_claim(claims, "event_name"),
        ref=str_claim(claims, "ref"),
        ref_type=str_claim(claims, "ref_type") or "",
        workflow=workflow_of(claims),
        home=home(claims),
        repository_id=id_claim(claims, "repository_id"),
        repository_owner_id=id_claim(claims, "repository_owner_id"),
    )


def run_from_workflow_run(payload: dict[str, Any], run: dict[str, Any]) -> RunFacts:
    """The facts of a signed `workflow_run` delivery.  The code that ran is the
    head repository's (a fork's, for a fork's pull request), and the payload
    has no ref type: `head_branch` holds a pushed tag's name too."""
    raw_repository = payload.get("repository")
    repository: dict[str, Any] = raw_repository if isinstance(raw_repository, dict) else {}
    full_name = repository.get("full_name") if isinstance(repository.get("full_name"), str) else None
    branch = run.get("head_branch")
    # GitHub's REST form of the path ends in `@<ref>`; the ref is no part of
    # the path (a map's workflow path holds no `@`).
    raw_path = run.get("path")
    path = raw_path.partition("@")[0] if isinstance(raw_path, str) else ""
    event = run.get("event")
    return RunFacts(
        event=event if isinstance(event, str) else None,
        ref=f"refs/heads/{branch}" if isinstance(branch, str) and branch else None,
        ref_type=None,
        workflow=workflows.WorkflowRef(full_name, path, None) if full_name else None,
        home=full_name,
        repository_id=object_id(run.get("head_repository")),
        repository_owner_id=object_id(repository.get("owner")),
    )


def refusal(binding: Binding, run: RunFacts) -> Refusal | None:
    """Why this run may not vote through `binding` (None: it may).  The one
    GitHub policy: the OIDC door raises it, the webhook door records nothing."""
    if run.repository_id != binding.repository_id:
        return Refusal("binding_mismatch", "repository_id",
                       "the run's code came from another repository than the bound one (a fork's pull request?)")
    if binding.repository_owner_id is not None and run.repository_owner_id != binding.repository_owner_id:
        return mismatched("repository_owner_id", binding.repository_owner_id, run.repository_owner_id, binding.where())
    if run.event not in VOTING_EVENTS and run.event not in binding.allow_events:
        return Refusal(
            "event_not_allowed", "event_name",
            f"event_name: a run triggered by {shown(run.event)} may build code that is not on a listed ref, so it "
            f"cannot vote; only {', '.join(VOTING_EVENTS)} vote unless the binding at {binding.where()} lists the "
            "event under allow_events",
        )
    if not ref_listed(binding.refs, run.ref):
        return mismatched("ref", f"one of {', '.join(binding.refs or ())}", run.ref, binding.where())
    if not ref_type_fits(binding.refs, run.ref, run.ref_type):
        return mismatched("ref_type", "branch" if (run.ref or "").startswith("refs/heads/") else "tag",
                          run.ref_type or "nothing", binding.where())
    if binding.workflows is not None and not workflows.names(binding.workflows, run.workflow, run.home):
        return mismatched("job_workflow_ref", f"one of {', '.join(binding.workflows)}",
                          str(run.workflow) if run.workflow else None, binding.where())
    return None


def authorize(binding: Binding, claims: dict[str, Any]) -> None:
    found = refusal(binding, run_from_claims(claims))
    if found is not None:
        raise found.error()


def workflow_of(claims: dict[str, Any]) -> workflows.WorkflowRef | None:
    value = str_claim(claims, "job_workflow_ref")
    return workflows.parse_github(value) if value else None


def home(claims: dict[str, Any]) -> str | None:
    return str_claim(claims, "repository")


def provenance(claims: dict[str, Any]) -> dict[str, Any]:
    out = {name: claims[name] for name in PROVENANCE if isinstance(claims.get(name), (str, int))}
    out["commit"] = claims.get("sha")
    return out
