"""GitLab CI `id_tokens` (gitlab.com or a self-managed instance).

Identity is the immutable `project_id` (and `namespace_id` when the binding
names it).  A binding's ref `main` means the branch main (`ref_type` branch);
`refs/heads/X` and `refs/tags/X` name a branch or a tag, so a tag called
`main` never passes for the branch.  Merge request pipelines
(`pipeline_source: merge_request_event`) run the merge request's code, from
a fork too, and are refused unless the binding allows that event by name.
"""

from __future__ import annotations

from typing import Any

from gateway.checkmaps.model import Binding
from gateway.errors import Forbidden
from gateway.oidc import workflows
from gateway.oidc.claims import id_claim, mismatch, str_claim

NAME = "gitlab"
REQUIRED = ("project_id", "project_path", "ref", "ref_type", "sha", "pipeline_id")
GATED_EVENTS = ("merge_request_event",)
PROVENANCE = ("project_path", "project_id", "namespace_id", "ref", "ref_type", "sha", "pipeline_id", "pipeline_source",
              "job_id", "ci_config_ref_uri", "user_login", "environment")


def identifies(binding: Binding, claims: dict[str, Any]) -> bool:
    if id_claim(claims, "project_id") != binding.project_id:
        return False
    return binding.namespace_id is None or id_claim(claims, "namespace_id") == binding.namespace_id


def identity_mismatch(bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
    carried = id_claim(claims, "project_id")
    same = [b for b in bindings if b.project_id == carried]
    if same:
        b = same[0]
        return mismatch("namespace_id", f"{b.namespace_id}", id_claim(claims, "namespace_id"), b.where())
    expected = ", ".join(f"{b.project_id} ({b.repository or 'unnamed'})" for b in bindings[:5])
    return mismatch("project_id", f"one of {expected}", f"{carried} ({str_claim(claims, 'project_path') or '?'})",
                    bindings[0].where())


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
    qualified = qualified_ref(claims)
    if refs is None or qualified is None:
        return False
    if "*" in refs:
        return True
    return any((r if r.startswith("refs/") else f"refs/heads/{r}") == qualified for r in refs)


def authorize(binding: Binding, claims: dict[str, Any]) -> None:
    source = str_claim(claims, "pipeline_source")
    if source in GATED_EVENTS and source not in binding.allow_events:
        raise Forbidden(
            f"pipeline_source: {source} pipelines run the merge request's code and are refused; add "
            f"allow_events: [{source}] to the binding at {binding.where()} to accept them",
            code="event_not_allowed",
        )
    if not ref_allowed(binding.refs, claims):
        carried = f"{claims.get('ref_type')} {claims.get('ref')}"
        raise mismatch("ref", f"one of {', '.join(binding.refs or ())}", carried, binding.where())
    if binding.workflows is not None and not workflows.names(binding.workflows, workflow_of(claims), home(claims)):
        raise mismatch("ci_config_ref_uri", f"one of {', '.join(binding.workflows)}", claims.get("ci_config_ref_uri"),
                       binding.where())


def workflow_of(claims: dict[str, Any]) -> workflows.WorkflowRef | None:
    value = str_claim(claims, "ci_config_ref_uri")
    return workflows.parse_gitlab(value) if value else None


def home(claims: dict[str, Any]) -> str | None:
    return str_claim(claims, "project_path")


def provenance(claims: dict[str, Any]) -> dict[str, Any]:
    out = {name: claims[name] for name in PROVENANCE if isinstance(claims.get(name), (str, int))}
    out["commit"] = claims.get("sha")
    return out
