"""Which workflow ran, and whether a check map's `workflows:` list names it.

A run's workflow is `(repository, path, ref)`: for GitHub it comes from the
signed `job_workflow_ref` (`OWNER/REPO/.github/workflows/ci.yml@refs/heads/main`,
the called workflow when a job uses a reusable one) or, for a webhook, from
the signed `workflow_run.path` in the delivering repository; for GitLab from
`ci_config_ref_uri`.

A `workflows:` item is either a path in the bound repository
(`.github/workflows/ci.yml`, `.gitlab-ci.yml`) or a path in a named
repository (`org/shared/.github/workflows/test.yml`, a reusable workflow;
`group/project//ci/test.yml` on GitLab), optionally pinned to a ref with
`@REF`.  Matching is exact (repository names compare
without case, as the forges treat them); no globbing, so `v*` cannot
quietly match `v1-rc`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# The parsers and `names` are pure and see the same few strings over and
# over (one workflow file per repository, run after run): an attestation asks
# each of them twice (the binding's run policy, then the check's rule), so
# they are memoised.  Bounded, and only a verified token's claims reach them.
_memo = functools.lru_cache(maxsize=256)


@dataclass(frozen=True)
class WorkflowRef:
    repository: str  # owner/name (GitHub) or group/project (GitLab), as the forge names it now
    path: str
    ref: str | None = None

    def __str__(self) -> str:
        return f"{self.repository}/{self.path}" + (f"@{self.ref}" if self.ref else "")


@_memo
def parse_github(job_workflow_ref: str) -> WorkflowRef | None:
    """`OWNER/REPO/PATH@REF` -> WorkflowRef (None when not of that shape)."""
    body, sep, ref = job_workflow_ref.rpartition("@")
    if not sep:
        body, ref = job_workflow_ref, ""
    owner, _, rest = body.partition("/")
    name, _, path = rest.partition("/")
    if not owner or not name or not path:
        return None
    return WorkflowRef(repository=f"{owner}/{name}", path=path, ref=ref or None)


@_memo
def parse_gitlab(ci_config_ref_uri: str) -> WorkflowRef | None:
    """`HOST/GROUP/PROJECT//PATH@REF` -> WorkflowRef (the host is dropped)."""
    body, sep, ref = ci_config_ref_uri.rpartition("@")
    if not sep:
        body, ref = ci_config_ref_uri, ""
    location, sep, path = body.partition("//")
    _, _, project = location.partition("/")
    if not sep or not project or not path:
        return None
    return WorkflowRef(repository=project, path=path, ref=ref or None)


def split_pattern(body: str, home_repository: str | None) -> tuple[str | None, str]:
    """(repository, path) named by a `workflows:` item without its `@REF`.

    `group/project//path` names a GitLab project's file; `owner/repo/.github/...`
    a GitHub repository's workflow; anything else is a path in the bound
    repository (`.github/workflows/ci.yml`, `.gitlab-ci.yml`).
    """
    if "//" in body:
        repository, _, path = body.partition("//")
        return repository, path
    if "/.github/" in body and not body.startswith(".github/"):
        repository, _, rest = body.partition("/.github/")
        return repository, ".github/" + rest
    return home_repository, body


@_memo
def names(patterns: tuple[str, ...], workflow: WorkflowRef | None, home_repository: str | None) -> bool:
    """True when one of `patterns` names `workflow`."""
    if workflow is None:
        return False
    for pattern in patterns:
        body, sep, ref = pattern.partition("@")
        if sep and ref != workflow.ref:
            continue
        repository, path = split_pattern(body, home_repository)
        if repository is not None and path == workflow.path and repository.lower() == workflow.repository.lower():
            return True
    return False
