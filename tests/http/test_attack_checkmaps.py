"""Attacks through the check map folder (issue 11 findings 5 and 8).

The attacker can add a file to the folder (a pull request that slips past
review, a second tool writing there) but cannot change the reviewed map in
force.  Three rules hold, all settled by `gateway.ci.checkmaps.conflicts`: one
file per project, one binding per secret variable, and no issuer with
immutable ids bound by `sub`; a colliding newcomer is the error and the file
in force stays in force.  Each variant asserts the problem is reported
(FILE:LINE on `/readyz` or by the CLI) and that nothing votes through the
refused file (snapshot of every table before and after).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.ci import webhook_signatures as sig
from gateway.ci.checkmaps.conflicts import resolve
from gateway.ci.checkmaps.validate import validate_text
from gateway.ci.providers.webhook import StandardWebhook, source_key
from tests.support.attest_fixtures import checkmap, gitlab_binding, learn, write_map
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import make_project
from tests.support.helpers import snapshot
from tests.support.oidc_issuer import OidcIssuer

CANARY_KEY = b"canary-key-0123456789abcdef"
CANARY_SECRET = "whsec_" + base64.b64encode(CANARY_KEY).decode()


def registry_of(hub: Any) -> Any:
    return hub.checkmaps


async def attest(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post("/v1/attestations", json={"check": "migrations", "outcome": "success"},
                             headers={"Authorization": f"Bearer {token}"})


async def std_hook(client: httpx.AsyncClient, source: str, now: float, message_id: str) -> httpx.Response:
    raw = json.dumps({"check": "migrations", "outcome": "success"}).encode()
    return await client.post(f"/v1/webhooks/{source}", content=raw, headers={
        "Content-Type": "application/json", "webhook-id": message_id, "webhook-timestamp": str(int(now)),
        "webhook-signature": sig.standard_sign(CANARY_KEY, message_id, int(now), raw)})


def webhook_binding(source: str, env: str) -> str:
    return f"""
  - provider: webhook
    source: {source}
    secret_env: {env}
"""


async def readyz_errors(client: httpx.AsyncClient) -> dict[str, str | None]:
    r = await client.get("/readyz")
    return {Path(row["file"]).name: row["error"] for row in r.json()["checkmaps"]}


# -- finding 5: a newcomer does not take a project over ------------------------------


@pytest.mark.parametrize("newcomer", ["0-takeover.yaml", "acme.yml", "Acme.yaml"])
async def test_a_newcomer_naming_a_served_project_never_displaces_the_map_in_force(
        hub: Any, client: httpx.AsyncClient, checkmap_dir: Path, gitlab_issuer: OidcIssuer, newcomer: str) -> None:
    await make_project(hub, "acme")
    entry = await learn(hub, "acme", "Migrations are reviewed.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", gitlab_binding(gitlab_issuer.url), {"migrations": [entry]}))
    # The newcomer binds the same CI system to any ref: its votes would come from any branch.
    await write_map(hub, checkmap_dir, newcomer,
                    checkmap("acme", gitlab_binding(gitlab_issuer.url, refs='["*"]'), {"migrations": [entry]}))
    errors = await readyz_errors(client)
    assert errors["acme.yaml"] is None
    assert f"{newcomer}:1: not loaded: project acme is already mapped by" in (errors[newcomer] or "")
    assert "stays in force" in (errors[newcomer] or "")
    before = await snapshot(hub)
    r = await attest(client, gitlab_issuer.gitlab_token(hub.clock.now(), ref="release"))  # protected, not listed
    assert r.status_code == 403 and r.json()["error"]["code"] == "binding_mismatch", r.text
    assert await snapshot(hub) == before
    r = await attest(client, gitlab_issuer.gitlab_token(hub.clock.now()))  # main: the reviewed binding still votes
    assert r.status_code == 201 and r.json()["counted"] is True, r.text


async def test_an_edit_of_the_map_in_force_that_names_another_served_project_keeps_the_last_good_version(
        hub: Any, client: httpx.AsyncClient, checkmap_dir: Path, gitlab_issuer: OidcIssuer) -> None:
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    acme_entry = await learn(hub, "acme", "Acme's entry.")
    beta_entry = await learn(hub, "beta", "Beta's entry.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", gitlab_binding(gitlab_issuer.url), {"migrations": [acme_entry]}))
    beta_map = checkmap("beta", webhook_binding("beta-canary", "BETA_CANARY_SECRET"), {"migrations": [beta_entry]})
    await write_map(hub, checkmap_dir, "beta.yaml", beta_map)
    # The acme file, edited to speak for beta with acme's CI system.
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("beta", gitlab_binding(gitlab_issuer.url, refs='["*"]'),
                                                               {"migrations": [beta_entry]}))
    errors = await readyz_errors(client)
    assert "project beta is already mapped by" in (errors["acme.yaml"] or "") and errors["beta.yaml"] is None
    before = await snapshot(hub)
    r = await attest(client, gitlab_issuer.gitlab_token(hub.clock.now(), ref="release"))
    assert r.status_code == 403, r.text  # the last good acme map: main only, and for acme
    assert await snapshot(hub) == before
    r = await attest(client, gitlab_issuer.gitlab_token(hub.clock.now()))
    assert r.status_code == 201 and r.json()["project"] == "acme", r.text


def test_at_start_two_files_of_one_project_load_neither_and_the_cli_names_both(tmp_path: Path) -> None:
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(checkmap("acme", webhook_binding(f"src-{name[0]}", f"SECRET_{name[0].upper()}"), {}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    result = subprocess.run([sys.executable, "-m", "gateway", "checkmap", "check", str(tmp_path)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert [line.split(":1: ")[0] for line in lines] == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    assert all("neither file is loaded" in line for line in lines)


# -- finding 8: one sender, one voice ------------------------------------------------


def test_two_bindings_of_one_file_sharing_a_secret_variable_are_a_problem() -> None:
    text = checkmap("acme", webhook_binding("one", "SHARED") + webhook_binding("two", "SHARED"), {})
    parsed, problems = validate_text(text, "acme.yaml")
    assert parsed is None
    assert [p.line for p in problems] == [7] and "SHARED is already named by the binding at line 3" in problems[0].message


async def test_a_second_file_reusing_a_secret_variable_is_refused_and_its_source_does_not_vote(
        hub: Any, client: httpx.AsyncClient, checkmap_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARED_CANARY", CANARY_SECRET)
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    entry = await learn(hub, "acme", "Acme's entry.")
    await write_map(hub, checkmap_dir, "acme.yaml",
                    checkmap("acme", webhook_binding("canary-one", "SHARED_CANARY"), {"migrations": [entry]}))
    # A second source for the same project family, reading the same secret: one sender, two voices.
    await write_map(hub, checkmap_dir, "0-beta.yaml",
                    checkmap("beta", webhook_binding("canary-two", "SHARED_CANARY"), {"migrations": []}))
    errors = await readyz_errors(client)
    assert "the secret variable SHARED_CANARY is already named by a binding in" in (errors["0-beta.yaml"] or "")
    assert errors["acme.yaml"] is None
    before = await snapshot(hub)
    r = await std_hook(client, "canary-two", hub.clock.now(), "m-1")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_source", r.text
    assert await snapshot(hub) == before
    r = await std_hook(client, "canary-one", hub.clock.now(), "m-2")
    assert r.status_code == 201 and r.json()["counted"] is True, r.text


async def test_secret_env_and_webhook_secret_env_are_one_namespace(
        hub: Any, client: httpx.AsyncClient, checkmap_dir: Path, issuer: OidcIssuer) -> None:
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", f"""
  - provider: github-actions
    issuer: {issuer.url}
    repository_id: "123456"
    refs: [refs/heads/main]
    webhook_secret_env: ONE_SECRET
""", {}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", webhook_binding("beta-src", "ONE_SECRET"), {}))
    errors = await readyz_errors(client)
    assert "ONE_SECRET is already named" in (errors["beta.yaml"] or "") and errors["acme.yaml"] is None
    assert registry_of(hub).snapshot.bound(source_key("beta-src"), StandardWebhook) == []


# -- finding 8: issuers with immutable ids are bound by them ------------------------


@pytest.mark.parametrize("issuer_url", ["https://token.actions.githubusercontent.com", "https://gitlab.com"])
def test_provider_oidc_may_not_bind_githubs_or_gitlab_coms_issuer(issuer_url: str) -> None:
    text = checkmap("acme", f"""
  - provider: oidc
    issuer: {issuer_url}
    subject: "repo:acme/api:ref:refs/heads/main"
""", {})
    parsed, problems = validate_text(text, "acme.yaml")
    assert parsed is None and len(problems) == 1
    assert problems[0].line == 3 and "immutable ids" in problems[0].message


def test_provider_oidc_may_not_bind_an_issuer_the_same_file_binds_by_id() -> None:
    text = checkmap("acme", gitlab_binding("https://gitlab.example.com") + """
  - provider: oidc
    issuer: https://gitlab.example.com
    subject: "project_path:acme/api:ref_type:branch:ref:main"
""", {})
    parsed, problems = validate_text(text, "acme.yaml")
    assert parsed is None and "immutable ids" in problems[0].message


async def test_a_file_binding_by_sub_an_issuer_another_file_binds_by_id_does_not_vote(
        hub: Any, client: httpx.AsyncClient, checkmap_dir: Path, issuer: OidcIssuer) -> None:
    """A GitHub Enterprise Server bound by repository id in acme.yaml; a newcomer
    binds the same issuer by a name-based sub (which a renamed or re-created
    repository can match)."""
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    beta_entry = await learn(hub, "beta", "Beta's entry.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", f"""
  - provider: github-actions
    issuer: {issuer.url}
    repository_id: "123456"
    refs: [refs/heads/main]
""", {}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", f"""
  - provider: oidc
    issuer: {issuer.url}
    subject: "repo:acme/api:ref:refs/heads/main"
""", {"migrations": [beta_entry]}))
    errors = await readyz_errors(client)
    assert "is bound by its immutable ids in" in (errors["beta.yaml"] or "")
    before = await snapshot(hub)
    token = issuer.github_token(hub.clock.now(), repository_id="999")  # a look-alike repository, same sub
    r = await attest(client, token)
    assert r.status_code == 403 and r.json()["error"]["code"] == "binding_mismatch", r.text
    assert "beta" not in r.text
    assert await snapshot(hub) == before


# -- the rule itself, without I/O ----------------------------------------------------


def _parsed(name: str, text: str) -> Any:
    parsed, problems = validate_text(text, name)
    assert problems == [], problems
    return parsed


def test_resolve_keeps_the_file_in_force_whatever_the_newcomer_is_named() -> None:
    reviewed = _parsed("z.yaml", checkmap("acme", webhook_binding("a", "A_SECRET"), {}))
    for newcomer_name in ("0.yaml", "a.yaml", "zz.yaml"):
        newcomer = _parsed(newcomer_name, checkmap("acme", webhook_binding("b", "B_SECRET"), {}))
        decisions = resolve({"z.yaml": (reviewed, reviewed), newcomer_name: (None, newcomer)})
        assert decisions["z.yaml"].keep is reviewed and decisions["z.yaml"].problems == ()
        assert decisions[newcomer_name].keep is None and len(decisions[newcomer_name].problems) == 1


def test_resolve_lets_several_projects_share_an_issuer_bound_by_id() -> None:
    one = _parsed("a.yaml", checkmap("a", gitlab_binding("https://gitlab.example.com"), {}))
    two = _parsed("b.yaml", checkmap("b", gitlab_binding("https://gitlab.example.com").replace('"42"', '"43"'), {}))
    decisions = resolve({"a.yaml": (None, one), "b.yaml": (None, two)})
    assert decisions["a.yaml"].keep is one and decisions["b.yaml"].keep is two


def test_allow_events_notes_are_printed_and_do_not_fail_the_check(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text(checkmap("acme", """
  - provider: github-actions
    repository_id: "123456"
    refs: [refs/heads/main]
    allow_events: [pull_request, push]
""", {}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    result = subprocess.run([sys.executable, "-m", "gateway", "checkmap", "check", str(tmp_path)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{tmp_path / 'acme.yaml'}:3: note: allow_events lifts pull_request" in result.stdout
    assert "allow_events names push, which votes anyway" in result.stdout


@pytest.mark.parametrize("issuer_url", ["https://token.actions.githubusercontent.com/acme-enterprise",
                                        "https://GITLAB.com", "https://gitlab.com:443"])
def test_provider_oidc_is_judged_by_the_issuers_host(issuer_url: str) -> None:
    """GitHub's per-enterprise issuer has GitHub's host and ids; spellings of
    gitlab.com are gitlab.com."""
    text = checkmap("acme", f"""
  - provider: oidc
    issuer: {issuer_url}
    subject: "repo:acme/api:ref:refs/heads/main"
""", {})
    parsed, problems = validate_text(text, "acme.yaml")
    assert parsed is None and any("immutable ids" in p.message for p in problems), problems


async def test_a_sub_binding_in_force_leaves_force_when_a_file_shows_its_issuer_has_ids(
        hub: Any, client: httpx.AsyncClient, checkmap_dir: Path, issuer: OidcIssuer) -> None:
    """The by-sub binding is the dodge wherever it stands: taking it out of
    force removes a voice, it never adds one."""
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    beta_entry = await learn(hub, "beta", "Beta's entry.")
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", f"""
  - provider: oidc
    issuer: {issuer.url}
    subject: "repo:acme/api:ref:refs/heads/main"
""", {"migrations": [beta_entry]}))
    assert "beta" in registry_of(hub).snapshot.maps
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", f"""
  - provider: github-actions
    issuer: {issuer.url}
    repository_id: "123456"
    refs: [refs/heads/main]
""", {}))
    errors = await readyz_errors(client)
    assert "is bound by its immutable ids in" in (errors["beta.yaml"] or "") and errors["acme.yaml"] is None
    assert "beta" not in registry_of(hub).snapshot.maps
    before = await snapshot(hub)
    r = await attest(client, issuer.github_token(hub.clock.now(), repository_id="999"))
    assert r.status_code == 403 and await snapshot(hub) == before


def test_an_edit_to_bind_by_sub_is_barred_though_its_own_old_version_bound_by_ids() -> None:
    """a.yaml bound a GitLab issuer by ids, as b.yaml does; its edit binds that
    issuer by sub.  b.yaml's ids bar it, whatever a.yaml's own old version
    held (it sorts first, and once hid b.yaml's claim)."""
    def gitlab(project: str, project_id: str) -> str:
        return checkmap(project, f"""
  - provider: gitlab
    issuer: https://gitlab.example.com
    project_id: "{project_id}"
    refs: [main]
""", {})
    by_ids, beta = validate_text(gitlab("acme", "1"), "a.yaml")[0], validate_text(gitlab("beta", "2"), "b.yaml")[0]
    by_sub = validate_text(checkmap("acme", """
  - provider: oidc
    issuer: https://gitlab.example.com
    subject: "project_path:acme/api:ref_type:branch:ref:main"
""", {}), "a.yaml")[0]
    assert by_ids is not None and beta is not None and by_sub is not None
    decisions = resolve({"a.yaml": (by_ids, by_sub), "b.yaml": (beta, beta)})
    assert decisions["a.yaml"].keep is by_ids and decisions["b.yaml"].keep is beta
    assert "is bound by its immutable ids in b.yaml" in decisions["a.yaml"].problems[0].message


@pytest.mark.parametrize("key", ["secret_env", "webhook_secret_env"])
def test_a_binding_may_not_name_the_gateways_own_settings_as_its_secret(key: str) -> None:
    binding = (webhook_binding("canary", "RELAYROOM_GITHUB_WEBHOOK_SECRET") if key == "secret_env" else """
  - provider: github-actions
    repository_id: "123456"
    refs: [refs/heads/main]
    webhook_secret_env: RELAYROOM_GITHUB_WEBHOOK_SECRET
""")
    parsed, problems = validate_text(checkmap("acme", binding, {}), "acme.yaml")
    assert parsed is None and "one of the gateway's own settings" in problems[0].message


async def test_a_short_webhook_secret_is_not_a_secret(
        hub: Any, client: httpx.AsyncClient, checkmap_dir: Path, issuer: OidcIssuer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_SHORT_SECRET", "/root")  # what HOME holds: guessable
    await make_project(hub, "acme")
    entry = await learn(hub, "acme", "Acme's entry.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", f"""
  - provider: github-actions
    issuer: {issuer.url}
    repository_id: "123456"
    refs: [refs/heads/main]
    webhook_secret_env: ACME_SHORT_SECRET
""", {"migrations": [entry]}))
    payload = {"action": "completed", "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890}},
               "workflow_run": {"id": 5, "run_attempt": 1, "name": "migrations", "conclusion": "success",
                                "event": "push", "head_branch": "main", "head_sha": "a" * 40,
                                "path": ".github/workflows/ci.yml", "head_repository": {"id": 123456}}}
    raw = json.dumps(payload).encode()
    before = await snapshot(hub)
    r = await client.post("/v1/webhooks/github", content=raw, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "workflow_run", "X-GitHub-Enterprise-Host": issuer.host,
        "X-Hub-Signature-256": sig.github_sign("/root", raw)})
    assert r.status_code == 401, r.text
    assert await snapshot(hub) == before


def test_a_project_collision_is_reported_at_the_project_line(tmp_path: Path) -> None:
    one = validate_text("# reviewed\n# by the team\nproject: acme\nissuers:" + webhook_binding("a", "A_S") + "checks: {}\n",
                        "a.yaml")[0]
    two = validate_text("project: acme\nissuers:" + webhook_binding("b", "B_S") + "checks: {}\n", "b.yaml")[0]
    decisions = resolve({"a.yaml": (None, one), "b.yaml": (None, two)})
    assert [p.line for p in decisions["a.yaml"].problems] == [3]
    assert [p.line for p in decisions["b.yaml"].problems] == [1]
