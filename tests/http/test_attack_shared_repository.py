"""One repository's CI speaks for one project (issue 33, finding 2).

The attacker owns project beta on the same hub and can get a check map
for it loaded.  acme's repository id is public.  Before the rule, beta's
map binding acme's id made every acme attestation that named no project a
422 `project_required` whose message told acme's CI log beta's slug, and
gave beta acme's CI as a voice of its own.  Now a repository is bound by
one project's map unless every binding of it, on both sides, names the
other project under `shared_with`; otherwise the newcomer is the error
(the file in force stays, at start neither loads), reported on `/readyz`,
by `relayroom checkmap check` and in the log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.ci import webhook_signatures as sig
from gateway.ci.checkmaps import CheckmapRegistry
from gateway.ci.checkmaps.conflicts import resolve
from gateway.ci.checkmaps.validate import validate_text
from gateway.core.clock import ManualClock
from gateway.core.config import Secret
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding, learn, write_map
from tests.support.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.conftest import make_project
from tests.support.helpers import snapshot
from tests.support.oidc_issuer import OidcIssuer

HUB_SECRET = "the-operators-github-app-secret"


async def attest(client: httpx.AsyncClient, token: str, **body: Any) -> httpx.Response:
    body.setdefault("check", "migrations")
    body.setdefault("outcome", "success")
    return await client.post("/v1/attestations", json=body, headers={"Authorization": f"Bearer {token}"})


async def readyz_errors(client: httpx.AsyncClient) -> dict[str, str | None]:
    r = await client.get("/readyz")
    return {Path(row["file"]).name: row["error"] for row in r.json()["checkmaps"]}


def shared(*projects: str) -> str:
    return f"    shared_with: [{', '.join(projects)}]"


@pytest.fixture
async def two_projects(hub: Any) -> dict[str, str]:
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    return {"acme": await learn(hub, "acme", "Migrations run in staging first."),
            "beta": await learn(hub, "beta", "Beta ships on Tuesdays.")}


# -- the attack of the issue ---------------------------------------------------------


@pytest.mark.parametrize("beta_extra", ["", shared("acme")], ids=["no consent", "one-sided consent"])
async def test_another_projects_map_binding_our_repository_is_the_error_and_silences_nothing(
        client: httpx.AsyncClient, hub: Any, checkmap_dir: Path, issuer: OidcIssuer, two_projects: dict[str, str],
        beta_extra: str, caplog: pytest.LogCaptureFixture) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url),
                                                             {"migrations": [two_projects["acme"]]}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", github_binding(issuer.url, extra=beta_extra),
                                                             {"migrations": [two_projects["beta"]]}))
    errors = await readyz_errors(client)
    assert errors["acme.yaml"] is None
    assert f"repository 123456 on {issuer.host} is already bound by project acme in {checkmap_dir / 'acme.yaml'}" in (
        errors["beta.yaml"] or ""), errors
    assert "shared_with: [acme] on this binding" in (errors["beta.yaml"] or "")
    assert "stays in force" in (errors["beta.yaml"] or "")
    assert any("beta.yaml" in r.getMessage() and "already bound by project acme" in r.getMessage()
               for r in caplog.records), "the log reports it too"
    assert "beta" not in hub.checkmaps.snapshot.maps
    # acme's CI, naming no project (the shipped action sends none), votes for acme, and hears nothing of beta.
    answer = await attest(client, issuer.github_token(hub.clock.now()))
    assert answer.status_code == 201 and answer.json()["project"] == "acme", answer.text
    assert "beta" not in answer.text
    # beta gains no voice: naming beta is refused, and the refusal names no project of the token's.
    before = await snapshot(hub)
    refused = await attest(client, issuer.github_token(hub.clock.now()), project="beta")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "project_mismatch"
    assert "acme" not in refused.text
    assert await snapshot(hub) == before


async def test_a_repository_shared_both_ways_needs_the_body_to_pick_and_names_only_those_projects(
        client: httpx.AsyncClient, hub: Any, checkmap_dir: Path, issuer: OidcIssuer,
        two_projects: dict[str, str]) -> None:
    await make_project(hub, "gamma")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url, extra=shared("beta")), {}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", github_binding(issuer.url, extra=shared("acme")), {}))
    gamma = github_binding(issuer.url).replace('"123456"', '"555"')  # another repository on the same issuer
    await write_map(hub, checkmap_dir, "gamma.yaml", checkmap("gamma", gamma, {}))
    assert set((await readyz_errors(client)).values()) == {None}
    before = await snapshot(hub)
    ambiguous = await attest(client, issuer.github_token(hub.clock.now()))
    assert ambiguous.status_code == 422 and ambiguous.json()["error"]["code"] == "project_required"
    message = ambiguous.json()["error"]["message"]
    assert "(acme, beta)" in message and "gamma" not in message
    assert await snapshot(hub) == before
    picked = await attest(client, issuer.github_token(hub.clock.now()), project="beta")
    assert picked.status_code == 201 and picked.json()["issuer"] == f"oidc:{issuer.host}:beta"
    # gamma's repository is its own: no project to pick.
    own = await attest(client, issuer.github_token(hub.clock.now(), repository_id="555"))
    assert own.status_code == 201 and own.json()["project"] == "gamma"


async def test_consent_is_withdrawn_by_dropping_the_binding_not_by_one_side_alone(
        client: httpx.AsyncClient, hub: Any, checkmap_dir: Path, issuer: OidcIssuer,
        two_projects: dict[str, str]) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url, extra=shared("beta")), {}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", github_binding(issuer.url, extra=shared("acme")), {}))
    # acme drops shared_with while beta's map still binds the repository: acme's edit is the error,
    # its last good version stays (a file in force never leaves force for a newcomer's sake).
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url), {}))
    errors = await readyz_errors(client)
    assert "already bound by project beta" in (errors["acme.yaml"] or "") and errors["beta.yaml"] is None
    assert hub.checkmaps.snapshot.maps["acme"].bindings[0].shared_with == ("beta",)
    # beta drops its binding: acme's edit loads, and the repository is acme's alone.
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", gitlab_binding("https://gitlab.example.com"), {}))
    await hub.checkmaps.refresh(hub.driver)
    assert set((await readyz_errors(client)).values()) == {None}
    answer = await attest(client, issuer.github_token(hub.clock.now()))
    assert answer.status_code == 201 and answer.json()["project"] == "acme"


async def test_a_repository_bound_without_consent_gets_no_second_voice_through_the_webhook_door(
        client: httpx.AsyncClient, hub: Any, checkmap_dir: Path, two_projects: dict[str, str]) -> None:
    hub.config = replace(hub.config, github_webhook_secret=Secret(HUB_SECRET))
    hub.intake.config = hub.config  # the intake was built with the config it reads
    app = "\n  - provider: github-actions\n    repository_id: \"123456\"\n    refs: [refs/heads/main]\n    github_app: true\n"
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", app, {"migrations": [two_projects["acme"]]}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", app, {"migrations": [two_projects["beta"]]}))
    body = {"action": "completed", "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890}},
            "workflow_run": {"id": 1, "run_attempt": 1, "name": "migrations", "conclusion": "success",
                             "event": "push", "head_branch": "main", "path": ".github/workflows/ci.yml",
                             "head_repository": {"id": 123456}}}
    raw = json.dumps(body).encode()
    r = await client.post("/v1/webhooks/github", content=raw, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "workflow_run",
        "X-Hub-Signature-256": sig.github_sign(HUB_SECRET, raw)})
    assert r.status_code == 201, r.text
    assert [a["project"] for a in r.json()["attestations"]] == ["acme"]


# -- the rule, as a table ------------------------------------------------------------------


def _map(name: str, project: str, binding: str) -> Any:
    parsed, problems = validate_text(checkmap(project, binding, {}), name)
    assert problems == [], problems
    return parsed


GH = "https://token.actions.githubusercontent.com"
GHES = "https://ghe.example.com/_services/token"


@pytest.mark.parametrize("one,two,collide", [
    (github_binding(GH), github_binding(GH), True),
    (github_binding(GH), github_binding(GH + "/acme-enterprise"), True),  # GitHub's per-enterprise issuer: github.com ids
    (github_binding(GH), github_binding(GHES), False),  # ids are numbered per GitHub host
    (github_binding(GH), github_binding(GH).replace('"123456"', '"123457"'), False),
    (github_binding(GH), github_binding(GH).replace('    repository_owner_id: "7890"\n', ""), True),
    (github_binding(GH, extra=shared("b")), github_binding(GH, extra=shared("a")), False),
    (github_binding(GH, extra=shared("b")), github_binding(GH), True),
    (github_binding(GH, extra=shared("b", "c")), github_binding(GH, extra=shared("c")), True),
    (gitlab_binding("https://gitlab.example.com"), gitlab_binding("https://gitlab.example.com:443"), True),
    (gitlab_binding("https://gitlab.example.com"), gitlab_binding("https://GITLAB.example.com"), True),
    (gitlab_binding("https://gitlab.example.com"), gitlab_binding("https://gitlab.com"), False),
    (gitlab_binding("https://gitlab.example.com"), gitlab_binding("https://gitlab.example.com/other"), False),
    ('\n  - provider: oidc\n    issuer: https://ci.example.com\n    subject: "repo:acme/api"\n',
     '\n  - provider: oidc\n    issuer: https://ci.example.com\n    subject: "repo:acme/api"\n', True),
    ('\n  - provider: oidc\n    issuer: https://ci.example.com\n    subject: "repo:acme/api"\n',
     '\n  - provider: oidc\n    issuer: https://ci.example.com\n    subject: "repo:acme/api:ref:main"\n', False),
    ('\n  - provider: oidc\n    issuer: https://ci.example.com\n    subject: "repo:acme/api"\n    shared_with: [b]\n',
     '\n  - provider: oidc\n    issuer: https://ci.example.com\n    subject: "repo:acme/api"\n    shared_with: [a]\n', False),
])
def test_which_bindings_are_one_repository(one: str, two: str, collide: bool) -> None:
    first, second = _map("a.yaml", "a", one), _map("b.yaml", "b", two)
    in_force = resolve({"a.yaml": (first, first), "b.yaml": (None, second)})
    assert in_force["a.yaml"].keep is first and in_force["a.yaml"].problems == ()
    assert (in_force["b.yaml"].keep is None) is collide, in_force["b.yaml"].problems
    at_start = resolve({"a.yaml": (None, first), "b.yaml": (None, second)})
    assert [at_start[n].keep is None for n in ("a.yaml", "b.yaml")] == [collide, collide]
    if collide:
        assert all("neither file is loaded" in p.message for n in at_start for p in at_start[n].problems)


def test_every_binding_of_the_repository_must_consent() -> None:
    """acme binds the repository twice (two ref sets): both bindings must name beta."""
    acme = _map("acme.yaml", "acme", github_binding(GH, extra=shared("beta"))
                + github_binding(GH, refs="[refs/tags/v1]"))
    beta = _map("beta.yaml", "beta", github_binding(GH, extra=shared("acme")))
    decisions = resolve({"acme.yaml": (acme, acme), "beta.yaml": (None, beta)})
    assert decisions["beta.yaml"].keep is None
    [problem] = decisions["beta.yaml"].problems
    assert problem.line == 3 and "already bound by project acme in acme.yaml" in problem.message


@pytest.mark.parametrize("extra,message", [
    ("    shared_with: [acme]", "shared_with names acme, this file's own project"),
    ("    shared_with: [Beta]", "shared_with: Beta is not a project slug"),
    ("    shared_with: beta", "shared_with must be a non-empty list of strings"),
    ("    shared_with: []", "shared_with must be a non-empty list of strings"),
])
def test_shared_with_is_a_list_of_other_projects(extra: str, message: str) -> None:
    parsed, problems = validate_text(checkmap("acme", github_binding(GH, extra=extra), {}), "acme.yaml")
    assert parsed is None and any(message in p.message for p in problems), problems


def test_a_webhook_source_takes_no_shared_with() -> None:
    text = checkmap("acme", "\n  - provider: webhook\n    source: canary\n    secret_env: CANARY\n    shared_with: [beta]\n", {})
    parsed, problems = validate_text(text, "acme.yaml")
    assert parsed is None and "unknown key shared_with for provider webhook" in problems[0].message


def test_at_start_neither_file_loads_and_the_cli_names_both(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text(checkmap("acme", github_binding(GH), {}))
    (tmp_path / "beta.yaml").write_text(checkmap("beta", github_binding(GH), {}))
    registry = CheckmapRegistry(tmp_path, ManualClock(start=0))
    registry.reload()
    assert registry.snapshot.maps == {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    result = subprocess.run([sys.executable, "-m", "gateway", "checkmap", "check", str(tmp_path)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [f"{tmp_path / 'acme.yaml'}:3", f"{tmp_path / 'beta.yaml'}:3"]
    assert all("GitHub repository 123456 on github.com is already bound by project" in line for line in lines)
