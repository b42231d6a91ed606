"""GitLab CI `id_tokens` (gitlab.com or a self-managed instance).

Identity is the immutable `project_id` (and `namespace_id` when the binding
names it).  A binding's ref `main` means the branch main (`ref_type` branch);
`refs/heads/X` and `refs/tags/X` name a branch or a tag, so a tag called
`main` never passes for the branch.

Which pipelines may vote is one policy, `refusal`: the ref must be protected
(`ref_protected` the string "true": only maintainers push there), and the
pipeline must not build a proposed change.  Merge request pipelines
(`merge_request_event`) run the merge request's code: a fork's merge request
pipeline runs in the parent project with `ref` the fork's branch name, so a
fork's `main` would pass for `main`.  External pull request pipelines
(`external_pull_request_event`, a GitHub pull request mirrored into GitLab
CI) build a pull request's code the same way and are refused for the same
reason.  Either votes only when the binding lists it under `allow_events`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gateway.ci.providers import workflows
from gateway.ci.providers.base import Binding, RunFacts
from gateway.ci.providers.claims import Refusal, id_claim, mismatch, mismatched, not_bound, shown, str_claim
from gateway.ci.providers.fields import Fields
from gateway.ci.providers.issuers import issuer_location
from gateway.core.errors import Forbidden

GITLAB_ISSUER = "https://gitlab.com"
REFUSED_SOURCES = ("merge_request_event", "external_pull_request_event")


@dataclass(frozen=True, kw_only=True)
class GitLab(Binding):
    NAME = "gitlab"
    LABEL = "GitLab"
    KEYS = frozenset({"issuer", "project_id", "project_path", "namespace_id", "refs", "workflows", "allow_events",
                      "shared_with"})
    BINDS_BY = "ids"
    DEFAULT_ISSUER = GITLAB_ISSUER
    ID_ISSUERS = (GITLAB_ISSUER,)
    REQUIRED_CLAIMS = ("project_id", "project_path", "ref", "ref_type", "sha", "pipeline_id")
    PROVENANCE_CLAIMS = ("project_path", "project_id", "namespace_id", "ref", "ref_type", "ref_protected", "sha",
                         "pipeline_id", "pipeline_source", "job_id", "ci_config_ref_uri", "user_login", "environment")
    LABELS = frozenset({"project_path"})
    EVENTS = "every pipeline source but merge_request_event and external_pull_request_event, on protected refs"

    project_id: str
    namespace_id: str | None = None
    project_path: str | None = None  # a name for people; the binding is the id

    @classmethod
    def read(cls, fields: Fields) -> dict[str, Any]:
        return {
            "project_path": fields.label("project_path"),
            "project_id": fields.numeric_id("project_id", required=True),
            "namespace_id": fields.numeric_id("namespace_id", required=False),
        }

    @classmethod
    def check_ref(cls, ref: str) -> str | None:
        if ref.startswith("refs/") and not ref.startswith(("refs/heads/", "refs/tags/")):
            return f"{ref}: a GitLab ref is a branch name (main), refs/heads/NAME or refs/tags/NAME"
        return None

    @classmethod
    def normal_ref(cls, ref: str) -> str:
        """`main` is the branch main, as `listed` reads it."""
        return ref if ref == "*" or ref.startswith("refs/") else f"refs/heads/{ref}"

    def repository_key(self) -> str | None:
        assert self.issuer is not None
        return f"GitLab project {self.project_id} on {issuer_location(self.issuer)}"

    def identifies(self, claims: dict[str, Any]) -> bool:
        if id_claim(claims, "project_id") != self.project_id:
            return False
        return self.namespace_id is None or id_claim(claims, "namespace_id") == self.namespace_id

    @classmethod
    def identity_mismatch(cls, bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
        """Only a token of a bound project hears what its binding expects."""
        carried = id_claim(claims, "project_id")
        same = [b for b in bindings if isinstance(b, GitLab) and b.project_id == carried]
        if same:
            b = same[0]
            return mismatch("namespace_id", f"{b.namespace_id}", id_claim(claims, "namespace_id"), b.where())
        return not_bound("project_id", carried, "project")

    @classmethod
    def run_from_claims(cls, claims: dict[str, Any]) -> RunFacts:
        return RunFacts(
            event=str_claim(claims, "pipeline_source"),
            ref=qualified_ref(claims),
            ref_type=str_claim(claims, "ref_type") or "",
            workflow=cls.workflow_of(claims),
            home=cls.home(claims),
            provider_facts={"project_id": id_claim(claims, "project_id"), "namespace_id": id_claim(claims, "namespace_id"),
                 "ref_protected": claims.get("ref_protected")},
        )

    def refusal(self, run: RunFacts) -> Refusal | None:
        """Why this pipeline may not vote through this binding (None: it may)."""
        if run.provider_facts.get("project_id") != self.project_id:
            return Refusal("binding_mismatch", "project_id", "the pipeline is not of the bound project")
        carried_namespace = run.provider_facts.get("namespace_id")
        if self.namespace_id is not None and carried_namespace != self.namespace_id:
            return mismatched("namespace_id", self.namespace_id, carried_namespace, self.where())
        if run.event in REFUSED_SOURCES and run.event not in self.allow_events:
            return Refusal(
                "event_not_allowed", "pipeline_source",
                f"pipeline_source: {run.event} pipelines build a proposed change's code (a fork's too) and cannot vote "
                f"unless the binding at {self.where()} lists {run.event} under allow_events",
            )
        if not listed(self.refs, run.ref):
            return mismatched("ref", f"one of {', '.join(self.refs or ())}", run.ref, self.where())
        # Exactly the string GitLab writes: a boolean, "True" or a missing claim is not GitLab's protected ref.
        protected = run.provider_facts.get("ref_protected")
        if protected != "true":
            return mismatched("ref_protected", '"true" (only a protected ref\'s pipelines vote)', shown(repr(protected)),
                              self.where())
        if self.workflows is not None and not workflows.names(self.workflows, run.workflow, run.home):
            return mismatched("ci_config_ref_uri", f"one of {', '.join(self.workflows)}",
                              str(run.workflow) if run.workflow else None, self.where())
        return None

    @classmethod
    def workflow_of(cls, claims: dict[str, Any]) -> workflows.WorkflowRef | None:
        value = str_claim(claims, "ci_config_ref_uri")
        return workflows.parse_gitlab(value) if value else None

    @classmethod
    def home(cls, claims: dict[str, Any]) -> str | None:
        return str_claim(claims, "project_path")

    @classmethod
    def run_record(cls, claims: dict[str, Any], issuer: str) -> dict[str, str | None]:
        path, pipeline = str_claim(claims, "project_path"), str_claim(claims, "pipeline_id")
        url = f"{issuer}/{quote(path)}/-/pipelines/{quote(pipeline)}" if path and pipeline else None
        return {"repository": path, "ref": qualified_ref(claims), "commit": str_claim(claims, "sha"),
                "workflow": str_claim(claims, "ci_config_ref_uri"), "run": f"pipeline {pipeline}", "url": url}

    def detail(self) -> str | None:
        return self.project_path or f"project #{self.project_id}"


def qualified_ref(claims: dict[str, Any]) -> str | None:
    ref, ref_type = str_claim(claims, "ref"), str_claim(claims, "ref_type")
    if ref is None:
        return None
    if ref_type == "branch":
        return f"refs/heads/{ref}"
    if ref_type == "tag":
        return f"refs/tags/{ref}"
    return None


def listed(refs: tuple[str, ...] | None, qualified: str | None) -> bool:
    """`qualified` carries the ref type, so a binding's `main` (the branch)
    never matches the tag main."""
    if refs is None or qualified is None:
        return False
    if "*" in refs:
        return True
    return any((r if r.startswith("refs/") else f"refs/heads/{r}") == qualified for r in refs)
