"""The publish step of the shipped CI files, run as a repository's CI runs it.

The GitHub action (given `checkmap`) and the GitLab template's
`.relayroom-publish-checkmap` job, taken out of their YAML and run with
bash, sh and busybox in a git checkout, against the real test issuer and a
live gateway bound to the repository by a file of its folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import live_setup, make_project
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding, learn
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.support.oidc_issuer import OidcIssuer
from tests.system.test_attest_deploy import (
    REQUEST_TOKEN,
    SHELLS,
    action_inputs,
    action_script,
    busybox_path,
    gitlab_script,
    gitlab_template,
)

pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("git") is None, reason="needs curl and git")

PATH = "checkmaps/acme.yaml"


@pytest.fixture
def backend() -> str:
    """The CI side: one store behind the gateway is enough (publication is tested on both in tests/http/)."""
    return "sqlite"


@dataclass
class Checkout:
    """A repository's checkout, bound to acme by the gateway's folder."""

    root: Path
    url: str
    entry: str
    github: OidcIssuer
    gitlab: OidcIssuer
    hub: Any

    def map(self, refs: str = "[refs/heads/main]", checks: dict[str, list[str]] | None = None) -> str:
        return checkmap("acme", github_binding(self.github.url, refs=refs) + gitlab_binding(self.gitlab.url),
                        checks if checks is not None else {"migrations": [self.entry]})

    def commit(self, text: str | bytes) -> str:
        """Write the map file and commit it; the commit's sha."""
        raw = text.encode() if isinstance(text, str) else text
        (self.root / PATH).write_bytes(raw)
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "--allow-empty", "-m", "map")
        return git(self.root, "rev-parse", "HEAD")

    def in_force(self) -> str:
        return str(self.hub.checkmaps.snapshot.maps["acme"].sha256)


def git(root: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@x",
           "GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@x"}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True,
                          timeout=60).stdout.strip()


@pytest.fixture
def checkout(live_server: Any, checkmap_dir: Path, tmp_path: Path, issuer: OidcIssuer,  # noqa: F811
             gitlab_issuer: OidcIssuer) -> Checkout:  # noqa: F811
    async def setup(hub: Any) -> str:
        await make_project(hub, "acme")
        entry = await learn(hub, "acme", "Migrations run in staging first.")
        (checkmap_dir / "acme.yaml").write_text(checkmap(
            "acme", github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url), {"migrations": [entry]}))
        await hub.checkmaps.refresh(hub.driver)
        return str(entry)

    root = tmp_path / "repo"
    (root / "checkmaps").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    made = Checkout(root, live_server.url, live_setup(live_server, setup), issuer, gitlab_issuer, live_server.hub)
    made.commit(made.map())
    return made


def run_action(checkout: Checkout, *, ref: str = "refs/heads/main", before: str = "", **claims: str) -> tuple[Any, dict[str, str]]:
    output = checkout.root.parent / "github_output"
    output.write_text("")
    query = "".join(f"&{name}={value}" for name, value in {"ref": ref, **claims}.items())
    env = {"PATH": os.environ["PATH"], "HOME": str(checkout.root), "GITHUB_OUTPUT": str(output),
           "RUNNER_TEMP": str(checkout.root.parent),
           "ACTIONS_ID_TOKEN_REQUEST_URL": f"{checkout.github.url}/mint/github?api-version=2.0{query}",
           "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN, **action_inputs(),
           "RELAYROOM_URL": checkout.url, "RELAYROOM_PROJECT": "acme", "RELAYROOM_CHECKMAP": PATH,
           "RELAYROOM_DEFAULT_BRANCH": "main", "RELAYROOM_BEFORE": before, "GITHUB_REF": ref,
           "GITHUB_SHA": git(checkout.root, "rev-parse", "HEAD"), "RELAYROOM_RUN_URL": "https://github.com/acme/api/actions/runs/1"}
    result = subprocess.run(["bash", "-c", action_script()], env=env, cwd=checkout.root, capture_output=True, text=True,
                            timeout=90)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return result, outputs


def test_the_action_publishes_the_file_byte_for_byte_and_a_check_is_in_force(checkout: Checkout) -> None:
    # Quotes, a backslash, a tab, text beyond ASCII and no final line break: the sha256 is the file's.
    text = checkout.map(checks={"migrations": [checkout.entry], "lint-\"strict\"": [checkout.entry]}).rstrip("\n")
    text = "# the map: naïve \\ ok\t✓\n" + text
    checkout.commit(text)
    result, outputs = run_action(checkout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert outputs["checkmap-status"] == "applied"
    assert outputs["checkmap-sha256"] == hashlib.sha256(text.encode()).hexdigest() == checkout.in_force()
    assert "::add-mask::" in result.stdout and len(checkout.github.mint_requests) == 1


def test_a_binding_change_is_published_and_waits_for_the_owner(checkout: Checkout) -> None:
    before = checkout.in_force()
    wider = checkout.map(refs="[refs/heads/main, refs/heads/release]")
    checkout.commit(wider)
    result, outputs = run_action(checkout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert outputs["checkmap-status"] == "pending_owner"
    assert "waits for the project owner's approval on the gateway's Checks page" in result.stdout
    assert checkout.in_force() == before


def test_off_the_default_branch_or_unchanged_nothing_is_sent(checkout: Checkout) -> None:
    result, outputs = run_action(checkout, ref="refs/heads/feature")
    assert result.returncode == 0 and outputs["checkmap-status"] == "skipped"
    assert "published from the default branch (main) only" in result.stdout
    first = git(checkout.root, "rev-parse", "HEAD")
    (checkout.root / "README.md").write_text("no map change\n")
    git(checkout.root, "add", "-A")
    git(checkout.root, "commit", "-q", "-m", "docs")
    result, outputs = run_action(checkout, before=first)
    assert result.returncode == 0 and outputs["checkmap-status"] == "skipped"
    assert f"this push did not change {PATH}" in result.stdout
    assert checkout.github.mint_requests == [], "no token was even requested"
    # A push whose before the checkout lacks (a shallow clone): published, and the gateway says unchanged.
    result, outputs = run_action(checkout, before="f" * 40)
    assert result.returncode == 0 and outputs["checkmap-status"] == "unchanged"


def test_an_invalid_map_fails_the_step_with_the_problem(checkout: Checkout) -> None:
    checkout.commit(checkout.map().replace("refs: [refs/heads/main]", "ref: [refs/heads/main]"))
    result, outputs = run_action(checkout)
    assert result.returncode == 1
    assert "::error::the gateway refused the check map (HTTP 422)" in result.stdout
    assert "unknown key ref: did you mean `refs`?" in result.stdout and outputs["refusal"] == "invalid_checkmap"


def test_a_pull_requests_run_cannot_publish_through_the_action(checkout: Checkout) -> None:
    """If a workflow runs the step on main for another event, the gateway still refuses the run."""
    checkout.commit(checkout.map(refs='["*"]'))
    result, outputs = run_action(checkout, event_name="pull_request_target")
    assert result.returncode == 1 and outputs["refusal"] == "event_not_allowed"


@pytest.mark.parametrize("shell", SHELLS)
def test_the_gitlab_job_publishes_the_file(checkout: Checkout, shell: str) -> None:
    text = checkout.map(checks={"lint": [checkout.entry]})
    checkout.commit(text)
    template = gitlab_template()
    job = template[".relayroom-publish-checkmap"]
    variables = {**template[".relayroom-attest"]["variables"], **job["variables"]}
    env = {"PATH": os.environ["PATH"] if shell == "sh" else busybox_path(checkout.root.parent),
           "TMPDIR": str(checkout.root.parent), **{k: str(v) for k, v in variables.items()},
           "RELAYROOM_URL": checkout.url, "RELAYROOM_PROJECT": "acme", "RELAYROOM_CHECKMAP": PATH,
           "RELAYROOM_ID_TOKEN": checkout.gitlab.gitlab_token(time.time()), "CI_COMMIT_BRANCH": "main",
           "CI_DEFAULT_BRANCH": "main"}
    result = subprocess.run(["sh", "-c", gitlab_script()], env=env, cwd=checkout.root, capture_output=True, text=True,
                            executable=shutil.which("sh", path=env["PATH"]), timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"status":"applied"' in result.stdout and checkout.in_force() == hashlib.sha256(text.encode()).hexdigest()


def test_the_gitlab_publish_job_runs_on_the_default_branch_when_the_map_changed() -> None:
    job = gitlab_template()[".relayroom-publish-checkmap"]
    assert job["extends"] == ".relayroom-attest"
    never = [rule["if"] for rule in job["rules"] if rule.get("when") == "never"]
    assert any('"merge_request_event"' in text and '"external_pull_request_event"' in text for text in never)
    assert any("$CI_COMMIT_BRANCH != $CI_DEFAULT_BRANCH" in text and "$CI_COMMIT_REF_PROTECTED" in text for text in never)
    assert job["rules"][-1] == {"changes": ["$RELAYROOM_CHECKMAP"]}
