"""What a check map says, once parsed and validated: plain frozen records.

A check map file names one project, the CI systems (issuer bindings) whose
runs may speak for it, and the checks whose success supports entries.  The
records below are what the rest of the gateway reads; the YAML never leaves
`gateway.ci.checkmaps`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from urllib.parse import urlsplit

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
GITLAB_ISSUER = "https://gitlab.com"
GITHUB_HOST = "github.com"

# GitHub events whose runs build the code of the ref they name: they vote
# without allow_events (docs/ci-attestations.md, which runs vote).
GITHUB_VOTING_EVENTS = ("push", "schedule", "workflow_dispatch")

OIDC_PROVIDERS = ("github-actions", "gitlab", "oidc")
PROVIDERS = OIDC_PROVIDERS + ("webhook",)


@functools.lru_cache(maxsize=256)
def issuer_host(issuer_url: str) -> str:
    """`host[:port]` of an issuer URL: the CI system's name in an issuer identity."""
    parts = urlsplit(issuer_url)
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def issuer_system(issuer_url: str) -> str:
    """The host an issuer URL names, the default https port dropped: the CI
    system it is, however the URL is spelled (for the immutable-id rule)."""
    host = issuer_host(issuer_url)
    return host[:-4] if host.endswith(":443") and issuer_url.lower().startswith("https:") else host


def issuer_location(issuer_url: str) -> str:
    """The issuer as one CI system names it, however its URL is spelled: its
    host (the default https port dropped) and its path."""
    return issuer_system(issuer_url) + urlsplit(issuer_url).path


@dataclass(frozen=True)
class Binding:
    """One `issuers:` item: a CI system, pinned to immutable ids, that may vote for a project."""

    project: str
    provider: str
    file: str
    line: int
    issuer: str | None = None  # the exact `iss` of OIDC tokens; None for webhook sources
    # github-actions
    repository: str | None = None  # a label for people; the binding is repository_id
    repository_id: str | None = None
    repository_owner_id: str | None = None
    webhook_secret_env: str | None = None
    github_app: bool = False  # takes deliveries signed with the hub-wide GitHub App secret
    # gitlab
    project_id: str | None = None
    namespace_id: str | None = None
    # generic oidc
    subject: str | None = None
    # every CI binding
    refs: tuple[str, ...] | None = None
    workflows: tuple[str, ...] | None = None
    allow_events: tuple[str, ...] = ()
    # the other projects whose maps may bind the same repository (each must name this one back)
    shared_with: tuple[str, ...] = ()
    # webhook sources
    source: str | None = None
    secret_env: str | None = None

    @property
    def identity(self) -> str:
        """The issuer identity of docs/ci-attestations.md, issuer identity: derived from the verified
        issuer (or webhook source), never from the provider label."""
        if self.provider == "webhook":
            return f"webhook:{self.source}:{self.project}"
        assert self.issuer is not None
        return f"oidc:{issuer_host(self.issuer)}:{self.project}"

    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def repository_key(self) -> str | None:
        """The repository whose CI this binding lets speak, as one name whatever
        the spelling of its issuer: one repository's CI speaks for one project
        unless both maps consent (`shared_with`).  None for a webhook source."""
        if self.issuer is None:
            return None
        if self.provider == "github-actions":
            host = issuer_system(self.issuer)
            # GitHub's per-enterprise issuers name github.com's repositories too.
            host = GITHUB_HOST if host == issuer_system(GITHUB_ISSUER) else host
            return f"GitHub repository {self.repository_id} on {host}"
        if self.provider == "gitlab":
            return f"GitLab project {self.project_id} on {issuer_location(self.issuer)}"
        return f"subject {self.subject!r} of {issuer_location(self.issuer)}"

    @property
    def github_host(self) -> str | None:
        """The GitHub host whose repository ids this binding names: github.com
        for GitHub's issuer, the issuer's host[:port] for GitHub Enterprise
        Server.  Repository ids are numbered per host, so an id means nothing
        without it."""
        if self.provider != "github-actions" or self.issuer is None:
            return None
        return GITHUB_HOST if self.issuer == GITHUB_ISSUER else issuer_host(self.issuer)


@dataclass(frozen=True)
class CheckRule:
    """One `checks:` item: which entries a success supports, and optionally
    which workflows may speak for the check."""

    name: str
    supports: tuple[str, ...]
    workflows: tuple[str, ...] | None
    line: int


@dataclass(frozen=True)
class CheckMap:
    project: str
    file: str
    sha256: str
    bindings: tuple[Binding, ...]
    checks: dict[str, CheckRule] = field(default_factory=dict)
    project_line: int = 1  # where `project:` is written, for the problems that name it


@dataclass(frozen=True)
class Problem:
    """A validation problem, printed as `FILE:LINE: message`."""

    file: str
    line: int
    message: str
    severity: str = "error"  # "note": said to the reader, never a reason to refuse the file

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"
