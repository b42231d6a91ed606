"""`relayroom ci init github|gitlab` writes the shipped attestation step into
a repository, and every step, include and path the docs, the command and the
Checks page name exists: a CI maintainer gets from zero to a counted
attestation with files that are there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.ci_steps import STEPS, github_usage, gitlab_usage, unreachable_from_ci

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# GitHub's own actions, which every runner can fetch.
GITHUB_ACTIONS = re.compile(r"actions/[a-z-]+@v\d+")


def relayroom(*args: str, cwd: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")} | settings
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "api"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    return repo


def test_ci_init_writes_the_shipped_step_at_the_checkouts_root(repository: Path) -> None:
    printed = {}
    for step in STEPS:
        done = relayroom("ci", "init", step.provider, "--gateway-url", "https://rr.acme.dev", "--check", "migrations",
                         cwd=repository / "src")
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert (repository / step.target).read_bytes() == step.source.read_bytes()
        assert done.stdout.splitlines()[0] == f"wrote ../{step.target}: commit it with the workflow that uses it"
        assert step.usage("https://rr.acme.dev", "migrations", "relayroom") in done.stdout
        assert step.publish_usage("https://rr.acme.dev", "PROJECT", "checkmaps/PROJECT.yaml", "relayroom") in done.stdout
        printed[step.provider] = done.stdout

    again = relayroom("ci", "init", "github", cwd=repository)
    assert again.returncode == 0 and again.stdout.startswith(".github/actions/relayroom-attest/action.yml is already this version")
    target = repository / STEPS[0].target
    target.write_text(target.read_text() + "# a local change\n")
    kept = relayroom("ci", "init", "github", cwd=repository)
    assert kept.returncode == 1 and "exists and differs from this version: --force replaces it" in kept.stderr
    assert target.read_text().endswith("# a local change\n")
    forced = relayroom("ci", "init", "github", "--force", cwd=repository)
    assert forced.returncode == 0 and target.read_bytes() == STEPS[0].source.read_bytes()


def test_the_printed_lines_carry_the_gateways_audience(repository: Path) -> None:
    """RELAYROOM_AUDIENCE set as the gateway has it, or --audience over it:
    runs whose tokens lacked that `aud` would all be refused."""
    for args, settings, audience in [((), {"RELAYROOM_AUDIENCE": "acme-rr"}, "acme-rr"),
                                     (("--audience", "other"), {"RELAYROOM_AUDIENCE": "acme-rr"}, "other")]:
        done = relayroom("ci", "init", "github", "--gateway-url", "https://rr.acme.dev", *args, cwd=repository, **settings)
        assert done.returncode == 0, done.stderr
        assert github_usage("https://rr.acme.dev", "tests", audience) in done.stdout
        assert f"audience: {audience}" in done.stdout


def test_a_loopback_gateway_url_comes_with_a_warning(repository: Path) -> None:
    done = relayroom("ci", "init", "github", "--gateway-url", "http://127.0.0.1:8750", cwd=repository)
    assert done.returncode == 0 and "gateway-url: http://127.0.0.1:8750" in done.stdout
    warning = done.stderr.strip()
    assert warning.startswith("warning: http://127.0.0.1:8750 is an address of this machine")
    assert "a CI runner cannot reach it" in warning and "https" in warning and "docs/deployment.md" in warning


@pytest.mark.parametrize("url, reachable", [
    ("https://relayroom.acme.dev", True),
    ("https://93.184.215.14:8443", True),
    ("http://127.0.0.1:8750", False),
    ("http://localhost:8750", False),
    ("https://[::1]:8750", False),
    ("https://10.1.2.3", False),
    ("https://192.168.1.20:8750", False),
    ("http://relayroom.acme.dev", False),  # reachable, but the OIDC token would cross the network in clear
])
def test_which_gateway_urls_a_ci_runner_can_use(url: str, reachable: bool) -> None:
    assert (unreachable_from_ci(url) is None) == reachable


def named_texts() -> dict[str, str]:
    """What names a CI step: the docs, the shipped files' own comments, the
    lines the command prints and the Checks page shows."""
    texts = {page.name: page.read_text() for page in PAGES}
    texts.update({f"shipped {step.provider}": step.source.read_text() for step in STEPS})
    texts["printed github"] = github_usage("https://rr.acme.dev", "tests", "relayroom")
    texts["printed gitlab"] = gitlab_usage("https://rr.acme.dev", "tests", "relayroom")
    for step in STEPS:
        texts[f"printed {step.provider} publish"] = step.publish_usage("https://rr.acme.dev", "acme", "checkmaps/acme.yaml",
                                                                        "relayroom")
    return texts


def test_every_step_and_include_named_exists_after_ci_init(repository: Path) -> None:
    for step in STEPS:
        assert relayroom("ci", "init", step.provider, cwd=repository).returncode == 0
    checked = 0
    for name, text in named_texts().items():
        for used in re.findall(r"uses:\s*([^\s#}]+)", text):
            used = used.strip("'\",")
            if used.startswith("./"):
                assert (repository / used / "action.yml").is_file(), f"{name}: uses: {used} is not a written action"
            else:
                assert GITHUB_ACTIONS.fullmatch(used), f"{name}: uses: {used} names an action no one publishes"
            checked += 1
        for kind, value in re.findall(r"-\s*(local|remote|project|template):\s*(\S+)", text):
            assert kind == "local", f"{name}: include {kind}: {value} points outside the repository"
            assert (repository / value.lstrip("/")).is_file(), f"{name}: include local: {value} is not written"
            checked += 1
    assert checked >= 8


def test_every_repository_path_the_docs_name_exists() -> None:
    # A path of this repository; a check map a user writes (checkmaps/acme.yaml) is theirs.
    pattern = re.compile(r"(?<![\w./-])((?:deploy|gateway|tests|scripts|bench|docs|checkmaps/examples)/[\w./-]*[\w/])")
    for page in PAGES:
        for path in pattern.findall(page.read_text()):
            path = path.split("::")[0]
            found = (ROOT / path).exists() or any((ROOT / path).parent.glob(Path(path).name + "*"))
            assert found, f"{page.name} names {path}, which the repository does not hold"
