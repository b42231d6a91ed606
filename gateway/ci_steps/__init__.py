"""The steps a repository's CI runs to attest: the GitHub composite action and
the GitLab job template, shipped inside the package so that
`relayroom ci init github|gitlab` writes them into the repository, and the
lines that use them (what the command prints and the Checks page shows).

A CI provider is one entry of STEPS: its file in this folder, where it goes
in a repository, and the snippets that use it from there: to attest a
check, and to publish the project's check map from the default branch.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
EXAMPLE_URL = "https://relayroom.example.com"
DEPLOYMENT_DOCS = "docs/deployment.md"
GITHUB_ACTION = ".github/actions/relayroom-attest"  # a local action is a folder holding action.yml
GITLAB_TEMPLATE = ".gitlab/relayroom-attest.gitlab-ci.yml"


@dataclass(frozen=True)
class Step:
    provider: str
    source: Path  # in the package
    target: str  # in the repository, relative to its root
    usage: Callable[[str, str, str], str]  # (gateway URL, check, audience) -> the lines that use it
    # (gateway URL, project, the map's path in the repository, audience) -> the lines that publish the map
    publish_usage: Callable[[str, str, str, str], str]


def github_usage(gateway_url: str, check: str, audience: str = "relayroom") -> str:
    extra = f"\n      audience: {audience}" if audience != "relayroom" else ""
    return f"""# .github/workflows/ci.yml (the job that runs the check)
permissions:
  contents: read
  id-token: write          # lets the job ask GitHub for its OIDC token
steps:
  - uses: actions/checkout@v4   # a local action is read from the checkout
  - run: make {check}
  - name: Tell RelayRoom
    if: always()           # failures are recorded too; they promote nothing
    uses: ./{GITHUB_ACTION}   # written by: relayroom ci init github
    with:
      gateway-url: {gateway_url}
      check: {check}
      outcome: ${{{{ job.status }}}}{extra}"""


def gitlab_usage(gateway_url: str, check: str, audience: str = "relayroom") -> str:
    extra = f"\n    RELAYROOM_AUDIENCE: {audience}" if audience != "relayroom" else ""
    variables = f"""  variables:
    RELAYROOM_URL: {gateway_url}
    RELAYROOM_CHECK: {check}{extra}"""
    return f"""# .gitlab-ci.yml
include:
  - local: {GITLAB_TEMPLATE}   # written by: relayroom ci init gitlab

attest-{check}:
  extends: .relayroom-attest
  stage: .post
{variables}

attest-{check}-failed:
  extends: .relayroom-attest-failure
  stage: .post
{variables}"""


def github_publish_usage(gateway_url: str, project: str, path: str, audience: str = "relayroom") -> str:
    extra = f"\n          audience: {audience}" if audience != "relayroom" else ""
    return f"""# .github/workflows/checkmap.yml (publishes the map when a push to the default branch changes it)
name: Check map
on:
  push:
    branches: [main]
    paths: [{path}]
  pull_request:
    paths: [{path}]
permissions:
  contents: read
  id-token: write
jobs:
  checkmap:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 2         # the step compares the file with the commit before the push
      # RELAYROOM_PACKAGE, a repository variable: where your team installs relayroom-gateway from (a wheel's URL, git+https://...)
      - run: pipx run --spec "${{{{ vars.RELAYROOM_PACKAGE }}}}" relayroom checkmap check {path}
      - uses: ./{GITHUB_ACTION}   # publishes from the default branch only
        with:
          gateway-url: {gateway_url}
          project: {project}
          checkmap: {path}{extra}"""


def gitlab_publish_usage(gateway_url: str, project: str, path: str, audience: str = "relayroom") -> str:
    extra = f"\n    RELAYROOM_AUDIENCE: {audience}" if audience != "relayroom" else ""
    return f"""# .gitlab-ci.yml (publishes the map when a push to the default branch changes it), with the
# include of {GITLAB_TEMPLATE} that the attestation jobs use
checkmap-check:
  image: python:3.12-slim
  rules:
    - changes: [{path}]
  script:   # RELAYROOM_PACKAGE, a CI/CD variable: where your team installs relayroom-gateway from
    - pip install "$RELAYROOM_PACKAGE" && relayroom checkmap check {path}

publish-checkmap:
  extends: .relayroom-publish-checkmap
  needs: [checkmap-check]
  variables:
    RELAYROOM_URL: {gateway_url}
    RELAYROOM_PROJECT: {project}
    RELAYROOM_CHECKMAP: {path}{extra}"""


STEPS = (
    Step("github", HERE / "github" / "action.yml", f"{GITHUB_ACTION}/action.yml", github_usage, github_publish_usage),
    Step("gitlab", HERE / "gitlab" / "relayroom-attest.gitlab-ci.yml", GITLAB_TEMPLATE, gitlab_usage,
         gitlab_publish_usage),
)
STEPS_BY_NAME = {step.provider: step for step in STEPS}


def unreachable_from_ci(gateway_url: str) -> str | None:
    """Why a hosted CI runner cannot post to `gateway_url`, or None.  A
    runner is another machine on the internet: loopback and private
    addresses are not the gateway to it, and its OIDC token is a
    credential that must not travel over plain http."""
    parts = urlsplit(gateway_url)
    host = (parts.hostname or "").lower()
    try:
        address = ipaddress.ip_address(host)
        local = address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified
    except ValueError:
        local = host == "localhost" or host.endswith(".localhost")
    if local:
        return (f"{gateway_url} is an address of this machine or its network: a CI runner cannot reach it. "
                f"CI needs the gateway at an https address it can reach ({DEPLOYMENT_DOCS} says how to serve one)")
    if parts.scheme != "https":
        return (f"{gateway_url} is not https: a CI job's OIDC token is a credential, sent only over https "
                f"({DEPLOYMENT_DOCS} says how to put TLS in front of the gateway)")
    return None
