"""GitHub Actions (github.com and GitHub Enterprise Server) runs.

Identity is the immutable `repository_id` (and `repository_owner_id` when
the binding names it): a repository deleted and re-created under the same
name, or a look-alike after a rename, has another id.  Repository ids are
numbered per GitHub host, so a binding's repository is its host and id.

Which runs may vote is one policy, `refusal`, over the run facts that both
doors build (`run_from_claims` for an OIDC token, `run_from_workflow_run`
for a signed webhook, `github_webhook`): a run votes only when the code that
ran is the code of a listed ref.  That holds for `push`, `schedule` and
`workflow_dispatch`.  A `pull_request` run builds a merge commit whose
workflow file the pull request wrote, whatever its head branch is called;
`pull_request_target`, `workflow_run`, `issue_comment`, `merge_group` and
the like run with a base ref but may build code that is not on it.  Those
vote only when the binding lifts them by name under `allow_events`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Hashable
from urllib.parse import quote, urlsplit

from gateway.ci.providers import workflows
from gateway.ci.providers.base import Binding, RunFacts
from gateway.ci.providers.claims import (
    Refusal,
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
from gateway.ci.providers.fields import INVISIBLE, VISIBLE_CHAR, Fields
from gateway.ci.providers.issuers import issuer_host, issuer_system
from gateway.core.errors import Forbidden

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
GITHUB_HOST = "github.com"
# The events whose run is the code of its ref: pushed to it, scheduled on
# the default branch, or dispatched on a chosen ref by someone with write access.
VOTING_EVENTS = ("push", "schedule", "workflow_dispatch")
_SEGMENT = f"[^/@{INVISIBLE}]"
WORKFLOW = re.compile(rf"^(?:{_SEGMENT}+/{_SEGMENT}+/)?\.github/workflows/{_SEGMENT}+\.ya?ml(?:@{VISIBLE_CHAR}+)?$")


@dataclass(frozen=True, kw_only=True)
class GitHubActions(Binding):
    NAME = "github-actions"
    LABEL = "GitHub Actions"
    KEYS = frozenset({"issuer", "repository", "repository_id", "repository_owner_id", "refs", "workflows",
                      "webhook_secret_env", "github_app", "allow_events", "shared_with"})
    BINDS_BY = "ids"
    DEFAULT_ISSUER = GITHUB_ISSUER
    ID_ISSUERS = (GITHUB_ISSUER,)
    REQUIRED_CLAIMS = ("repository", "repository_id", "repository_owner_id", "ref", "sha", "job_workflow_ref",
                       "event_name", "run_id", "run_attempt")
    PROVENANCE_CLAIMS = ("repository", "repository_id", "repository_owner_id", "ref", "ref_type", "sha", "workflow",
                         "workflow_ref", "job_workflow_ref", "run_id", "run_number", "run_attempt", "event_name",
                         "actor", "environment")
    LABELS = frozenset({"repository_name"})
    EVENTS = ", ".join(VOTING_EVENTS)

    repository_id: str
    repository_owner_id: str | None = None
    repository_name: str | None = None  # `repository:`, a name for people; the binding is the id
    webhook_secret_env: str | None = None
    github_app: bool = False  # takes deliveries signed with the hub-wide GitHub App secret

    # -- the check map ---------------------------------------------------------------

    @classmethod
    def read(cls, fields: Fields) -> dict[str, Any]:
        return {
            "repository_name": fields.label("repository"),
            "repository_id": fields.numeric_id("repository_id", required=True),
            "repository_owner_id": fields.numeric_id("repository_owner_id", required=False),
            "webhook_secret_env": fields.env_name("webhook_secret_env", required=False),
            "github_app": fields.flag("github_app"),
        }

    @classmethod
    def check_ref(cls, ref: str) -> str | None:
        if not ref.startswith("refs/"):
            return f"{ref}: GitHub refs are full names such as refs/heads/{ref} or refs/tags/v1"
        return None

    @classmethod
    def check_workflow(cls, workflow: str) -> str | None:
        if not WORKFLOW.fullmatch(workflow):
            return (f"{workflow}: a GitHub workflow is .github/workflows/NAME.yml, or "
                    "OWNER/REPO/.github/workflows/NAME.yml[@REF] for a reusable workflow of another repository")
        return None

    @property
    def github_host(self) -> str:
        """The GitHub host a webhook delivery of this binding's repository
        comes from: github.com for GitHub's issuer, the issuer's host[:port]
        for GitHub Enterprise Server."""
        assert self.issuer is not None
        return GITHUB_HOST if self.issuer == GITHUB_ISSUER else issuer_host(self.issuer)

    def repository_key(self) -> str | None:
        assert self.issuer is not None
        return f"GitHub repository {self.repository_id} on {issuer_system_of_ids(self.issuer)}"

    def secret_names(self) -> tuple[str, ...]:
        return (self.webhook_secret_env,) if self.webhook_secret_env else ()

    def lookup_keys(self) -> tuple[Hashable, ...]:
        return (delivery_key(self.github_host, self.repository_id),)

    # -- the OIDC door -------------------------------------------------------------------

    def identifies(self, claims: dict[str, Any]) -> bool:
        if id_claim(claims, "repository_id") != self.repository_id:
            return False
        return self.repository_owner_id is None or id_claim(claims, "repository_owner_id") == self.repository_owner_id

    @classmethod
    def identity_mismatch(cls, bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
        """Only a token of a bound repository hears what its binding expects."""
        carried = id_claim(claims, "repository_id")
        same_repo = [b for b in bindings if isinstance(b, GitHubActions) and b.repository_id == carried]
        if same_repo:
            b = same_repo[0]
            return mismatch("repository_owner_id", f"{b.repository_owner_id}", id_claim(claims, "repository_owner_id"),
                            b.where())
        return not_bound("repository_id", carried, "repository")

    @classmethod
    def run_from_claims(cls, claims: dict[str, Any]) -> RunFacts:
        return RunFacts(
            event=str_claim(claims, "event_name"),
            ref=str_claim(claims, "ref"),
            ref_type=str_claim(claims, "ref_type") or "",
            workflow=cls.workflow_of(claims),
            home=cls.home(claims),
            provider_facts={"repository_id": id_claim(claims, "repository_id"),
                 "repository_owner_id": id_claim(claims, "repository_owner_id")},
        )

    def refusal(self, run: RunFacts) -> Refusal | None:
        """Why this run may not vote through this binding (None: it may).  The
        one GitHub policy: the OIDC door raises it, the webhook door records nothing."""
        if run.provider_facts.get("repository_id") != self.repository_id:
            return Refusal("binding_mismatch", "repository_id",
                           "the run's code came from another repository than the bound one (a fork's pull request?)")
        carried_owner = run.provider_facts.get("repository_owner_id")
        if self.repository_owner_id is not None and carried_owner != self.repository_owner_id:
            return mismatched("repository_owner_id", self.repository_owner_id, carried_owner, self.where())
        if run.event not in VOTING_EVENTS and run.event not in self.allow_events:
            return Refusal(
                "event_not_allowed", "event_name",
                f"event_name: a run triggered by {shown(run.event)} may build code that is not on a listed ref, so it "
                f"cannot vote; only {', '.join(VOTING_EVENTS)} vote unless the binding at {self.where()} lists the "
                "event under allow_events",
            )
        if not ref_listed(self.refs, run.ref):
            return mismatched("ref", f"one of {', '.join(self.refs or ())}", run.ref, self.where())
        if not ref_type_fits(self.refs, run.ref, run.ref_type):
            return mismatched("ref_type", "branch" if (run.ref or "").startswith("refs/heads/") else "tag",
                              run.ref_type or "nothing", self.where())
        if self.workflows is not None and not workflows.names(self.workflows, run.workflow, run.home):
            return mismatched("job_workflow_ref", f"one of {', '.join(self.workflows)}",
                              str(run.workflow) if run.workflow else None, self.where())
        return None

    @classmethod
    def workflow_of(cls, claims: dict[str, Any]) -> workflows.WorkflowRef | None:
        value = str_claim(claims, "job_workflow_ref")
        return workflows.parse_github(value) if value else None

    @classmethod
    def home(cls, claims: dict[str, Any]) -> str | None:
        return str_claim(claims, "repository")

    @classmethod
    def run_record(cls, claims: dict[str, Any], issuer: str) -> dict[str, str | None]:
        repository, run_id = str_claim(claims, "repository"), str_claim(claims, "run_id")
        attempt = str_claim(claims, "run_attempt") or "1"
        url = None
        if repository and run_id:
            # The run's page is on the GitHub host that numbers the repository's ids.
            parts = urlsplit(issuer)
            host = issuer_system_of_ids(issuer)
            web = f"https://{host}" if host == GITHUB_HOST else f"{parts.scheme}://{parts.netloc}"
            url = f"{web}/{quote(repository)}/actions/runs/{quote(run_id)}/attempts/{quote(attempt)}"
        return {"repository": repository, "ref": str_claim(claims, "ref"), "commit": str_claim(claims, "sha"),
                "workflow": str_claim(claims, "job_workflow_ref"), "run": f"{run_id} attempt {attempt}", "url": url}

    # -- what people read ----------------------------------------------------------------

    def detail(self) -> str | None:
        return self.repository_name or f"repository #{self.repository_id}"

    def allow_event_note(self, event: str) -> str:
        if event in VOTING_EVENTS:
            return f"allow_events names {event}, which votes anyway"
        return super().allow_event_note(event)


def issuer_system_of_ids(issuer: str) -> str:
    """The GitHub host that numbers the ids of `issuer`'s tokens, however the
    issuer is spelled: github.com for GitHub's issuers."""
    system = issuer_system(issuer)
    return GITHUB_HOST if system == issuer_system(GITHUB_ISSUER) else system


def delivery_key(host: str, repository_id: str) -> Hashable:
    """How the webhook door finds the bindings of a delivery's repository."""
    return ("github repository", host, repository_id)


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
        provider_facts={"repository_id": object_id(run.get("head_repository")),
             "repository_owner_id": object_id(repository.get("owner"))},
    )
