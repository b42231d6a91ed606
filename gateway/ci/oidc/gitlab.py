"""GitLab CI `id_tokens` (gitlab.com or a self-managed instance).

Identity is the immutable `project_id` (and `namespace_id` when the binding
names it).  A binding's ref `main` means the branch main (`ref_type` branch);
`refs/heads/X` and `refs/tags/X` name a branch or a tag, so a tag called
`main` never passes for the branch.

Which pipelines may vote is one policy, `refusal` (docs/ci-attestations.md, which runs vote): the ref
must be protected (`ref_protected` the string "true": only maintainers
push there), and the pipeline must not build a proposed change.  Merge
request pipelines (`merge_request_event`) run the merge request's code: a
fork's merge request pipeline runs in the parent project with `ref` the
fork's branch name, so a fork's `main` would pass for `main`.  External
pull request pipelines (`external_pull_request_event`, a GitHub pull
request mirrored into GitLab CI) build a pull request's code the same way
and are refused for the same reason.  Either votes only when the binding
lists it under `allow_events`.
"""

from __future__ import annotations

from typing import Any

from gateway.ci.checkmaps.model import Binding
from gateway.core.errors import Forbidden
from gateway.ci.oidc import workflows
from gateway.ci.oidc.claims import Refusal, RunFacts, id_claim, mismatch, mismatched, not_bound, shown, str_claim

NAME = "gitlab"
REQUIRED = ("project_id", "project_path", "ref", "ref_type", "sha", "pipeline_id")
REFUSED_SOURCES = ("merge_request_event", "external_pull_request_event")
PROVENANCE = ("project_path", "project_id", "namespace_id", "ref", "ref_type", "ref_protected", "sha", "pipeline_id",
              "pipeline_source", "job_id", "ci_config_ref_uri", "user_login", "environment")


def identifies(binding: Binding, claims: dict[str, Any]) -> bool:
    if id_claim(claims, "project_id") != binding.project_id:
        return False
    return binding.namespace_id is None or id_claim(claims, "namespace_id") == binding.namespace_id


def identity_mismatch(bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
    """Only a token of a bound project hears what its binding expects."""
    carried = id_claim(claims, "project_id")
    same = [b for b in bindings if b.project_id == carried]
    if same:
        b = same[0]
        return mismatch("namespace_id", f"{b.namespace_id}", id_claim(claims, "namespace_id"), b.where())
    return not_bound("project_id", carried, "project")


def qualified_ref(claims: dict[str, Any]) -> str | None:
    ref, ref_type = str_claim(claims, "ref"), str_claim(claims, "ref_type")
    if ref is None:
        return None
    if ref_type == "branch":
        return f"refs/heads/{ref}"
    if ref_type == "tag":
        return f"refs/tags/{ref}"
    return None


def ref_allowed(refs: tuple[str, ...] | None, claims: dict[str, Any]) -> bool:
    return listed(refs, qualified_ref(claims))


def listed(refs: tuple[str, ...] | None, qualified: str | None) -> bool:
    """`qualified` carries the ref type, so a binding's `main` (the branch)
    never matches the tag main."""
    if refs is None or qualified is None:
        return False
    if "*" in refs:
        return True
    return any((r if r.startswith("refs/") else f"refs/heads/{r}") == qualified for r in refs)


def run_from_claims(claims: dict[str, Any]) -> RunFacts:
    return RunFacts(
        event=str_claim(claims, "pipeline_source"),
        ref=qualified_ref(claims),
        ref_type=str_claim(claims, "ref_type") or "",
        workflow=workflow_of(claims),
        home=home(claims),
        project_id=id_claim(claims, "project_id"),
        namespace_id=id_claim(claims, "namespace_id"),
        ref_protected=claims.get("ref_protected"),
    )


def refusal(binding: Binding, run: RunFacts) -> Refusal | None:
    """Why this pipeline may not vote through `binding` (None: it may)."""
    if run.project_id != binding.project_id:
        return Refusal("binding_mismatch", "project_id", "the pipeline is not of the bound project")
    if binding.namespace_id is not None and run.namespace_id != binding.namespace_id:
        return mismatched("namespace_id", binding.namespace_id, run.namespace_id, binding.where())
    if run.event in REFUSED_SOURCES and run.event not in binding.allow_events:
        return Refusal(
            "event_not_allowed", "pipeline_source",
            f"pipeline_source: {run.event} pipelines build a proposed change's code (a fork's too) and cannot vote "
            f"unless the binding at {binding.where()} lists {run.event} under allow_events",
        )
    if not listed(binding.refs, run.ref):
        return mismatched("ref", f"one of {', '.join(binding.refs or ())}", run.ref, binding.where())
    # Exactly the string GitLab writes: a boolean, "True" or a missing claim is not GitLab's protected ref.
    if run.ref_protected != "true":
        return mismatched("ref_protected", '"true" (only a protected ref\'s pipelines vote)',
                          shown(repr(run.ref_protected)), binding.where())
    if binding.workflows is not None and not workflows.names(binding.workflows, run.workflow, run.home):
        return mismatched("ci_config_ref_uri", f"one of {', '.join(binding.workflows)}",
                          str(run.workflow) if run.workflow else None, binding.where())
    return None


def authorize(binding: Binding, claims: dict[str, Any]) -> None:
    found = refusal(binding, run_from_claims(claims))
    if found is not None:
        raise found.error()


def workflow_of(claims: dict[str, Any]) -> workflows.WorkflowRef | None:
    value = str_claim(claims, "ci_config_ref_uri")
    return workflows.parse_gitlab(value) if value else None


def home(claims: dict[str, Any]) -> str | None:
    return str_claim(claims, "project_path")


def provenance(claims: dict[str, Any]) -> dict[str, Any]:
    out = {name: claims[name] for name in PROVENANCE if isinstance(claims.get(name), (str, int))}
    out["commit"] = claims.get("sha")
    return out
