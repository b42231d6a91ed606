"""Attacks on who may vote (issue 11 findings 1, 2 and 6), through both CI doors.

The attacker can push a branch, open a pull request (from the repository or
a fork), comment, push a tag, mint a GitHub token for a repository of its
own on a shared issuer, and may know the hub-wide GitHub App secret.  Each
variant asserts the contract's refusal AND that nothing was recorded: the
row counts of every table a request could change are the same before and
after (tests/helpers.snapshot).  A few positive cases show the rule is not
simply "refuse everything": `allow_events` lifts an event, `"*"` takes a tag.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace
from typing import Any

import httpx
import pytest

from gateway.ci import webhook_signatures as sig
from gateway.core.config import Secret
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding, learn, write_map
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import make_project
from tests.support.helpers import snapshot
from tests.support.oidc_issuer import OidcIssuer

OWN_SECRET = "acme-own-webhook-secret"
HUB_SECRET = "the-operators-github-app-secret"
GHES = "https://ghe.example.com/_services/token"


async def attest(client: httpx.AsyncClient, token: str, **body: Any) -> httpx.Response:
    body.setdefault("check", "migrations")
    body.setdefault("outcome", "success")
    return await client.post("/v1/attestations", json=body, headers={"Authorization": f"Bearer {token}"})


def workflow_run(run_id: int, **run: Any) -> dict[str, Any]:
    """A completed workflow_run of acme/api (id 123456) on main, as GitHub sends it."""
    fields: dict[str, Any] = {
        "id": run_id, "run_attempt": 1, "name": "migrations", "conclusion": "success", "event": "push",
        "head_branch": "main", "head_sha": "acb5820ced9479c074f688cc328bf03f341a511d",
        "path": ".github/workflows/ci.yml", "head_repository": {"id": 123456, "full_name": "acme/api"},
    }
    fields.update(run)
    return {"action": "completed", "workflow_run": fields,
            "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890, "login": "acme"}}}


async def hook(client: httpx.AsyncClient, body: dict[str, Any], secret: str, host: str | None) -> httpx.Response:
    raw = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "workflow_run", "X-GitHub-Delivery": "d",
               "X-Hub-Signature-256": sig.github_sign(secret, raw)}
    if host is not None:
        headers["X-GitHub-Enterprise-Host"] = host
    return await client.post("/v1/webhooks/github", content=raw, headers=headers)


async def refused(hub: Any, send: Any, status: int, code: str | None = None, reason: str | None = None) -> dict[str, Any]:
    """Send, assert the refusal, and that no table changed; returns the body."""
    before = await snapshot(hub)
    response = await send()
    assert response.status_code == status, response.text
    body = response.json()
    if code is not None:
        assert body["error"]["code"] == code, body
    if reason is not None:
        assert body["recorded"] is False and body["reason"] == reason, body
    assert await snapshot(hub) == before
    return body


@pytest.fixture
async def entry(hub: Any, acme: Any) -> str:
    return await learn(hub, "acme", "Migrations run in staging before production.")


# -- finding 1: which runs may vote, OIDC door ---------------------------------------------------------------------


async def test_github_tokens_of_runs_that_did_not_build_a_listed_ref_never_vote(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, issuer: OidcIssuer, clock: Any) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url), {"migrations": [entry]}))
    now = clock.now()
    for event, ref in [("pull_request", "refs/pull/1/merge"), ("pull_request", "refs/heads/main"),
                       ("pull_request_target", "refs/heads/main"), ("workflow_run", "refs/heads/main"),
                       ("issue_comment", "refs/heads/main"), ("merge_group", "refs/heads/main"),
                       ("release", "refs/heads/main"), ("PUSH", "refs/heads/main"), ("push ", "refs/heads/main")]:
        body = await refused(hub, lambda: attest(client, issuer.github_token(now, event_name=event, ref=ref)), 403,
                             "event_not_allowed")
        assert "allow_events" in body["error"]["message"]
    # A tag named main is not the branch main; a token claiming the branch with ref_type tag
    # (or none) is not a branch run either.
    for overrides, claim in [({"ref": "refs/tags/main", "ref_type": "tag"}, "ref"),
                             ({"ref": "refs/heads/main", "ref_type": "tag"}, "ref_type"),
                             ({"ref": "refs/heads/main", "ref_type": None}, "ref_type"),
                             ({"ref": "refs/heads/main", "ref_type": "Branch"}, "ref_type")]:
        body = await refused(hub, lambda: attest(client, issuer.github_token(now, **overrides)), 403, "binding_mismatch")
        assert body["error"]["claim"] == claim
    await refused(hub, lambda: attest(client, issuer.github_token(now, event_name="")), 401, "missing_claim")
    for event in ("push", "schedule", "workflow_dispatch"):  # what may vote still does
        assert (await attest(client, issuer.github_token(now, event_name=event))).status_code == 201


async def test_star_refs_still_refuse_pull_requests_and_allow_events_lifts_only_what_it_names(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, issuer: OidcIssuer, clock: Any) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", github_binding(issuer.url, refs='["*"]', extra="    allow_events: [workflow_run]"), {"migrations": [entry]}))
    now = clock.now()
    for event, ref in [("pull_request", "refs/pull/7/merge"), ("pull_request_target", "refs/heads/main"),
                       ("issue_comment", "refs/heads/main"), ("merge_group", "refs/heads/gh-readonly-queue/main/pr-7")]:
        await refused(hub, lambda: attest(client, issuer.github_token(now, event_name=event, ref=ref)), 403,
                      "event_not_allowed")
    # "*" takes any ref of any type; the named event votes.
    tag = await attest(client, issuer.github_token(now, ref="refs/tags/v1", ref_type="tag"))
    lifted = await attest(client, issuer.github_token(now, event_name="workflow_run"))
    assert tag.status_code == 201 and lifted.status_code == 201 and lifted.json()["counted"] is True


async def test_gitlab_merge_request_and_unprotected_pipelines_never_vote(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, gitlab_issuer: OidcIssuer, clock: Any) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", gitlab_binding(gitlab_issuer.url), {"migrations": [entry]}))
    now = clock.now()
    # A fork's merge request pipeline runs in the parent project (project_id 42) with the fork's branch name.
    fork_mr = {"pipeline_source": "merge_request_event", "ref": "main", "ref_protected": "false",
               "user_login": "outsider"}
    for overrides in (fork_mr, {**fork_mr, "ref_protected": "true"}, {"pipeline_source": "external_pull_request_event"}):
        await refused(hub, lambda: attest(client, gitlab_issuer.gitlab_token(now, **overrides)), 403, "event_not_allowed")
    for protected in ("false", None, True, "True", 1, ""):
        body = await refused(hub, lambda: attest(client, gitlab_issuer.gitlab_token(now, ref_protected=protected)), 403,
                             "binding_mismatch")
        assert body["error"]["claim"] == "ref_protected"
    await refused(hub, lambda: attest(client, gitlab_issuer.gitlab_token(now, ref_type="tag")), 403, "binding_mismatch")
    assert (await attest(client, gitlab_issuer.gitlab_token(now, pipeline_source="schedule"))).status_code == 201


async def test_gitlab_allow_events_lifts_merge_request_pipelines_on_protected_refs_only(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, gitlab_issuer: OidcIssuer, clock: Any) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", gitlab_binding(gitlab_issuer.url, extra="    allow_events: [merge_request_event]"), {"migrations": [entry]}))
    now = clock.now()
    await refused(hub, lambda: attest(client, gitlab_issuer.gitlab_token(
        now, pipeline_source="merge_request_event", ref_protected="false")), 403, "binding_mismatch")
    await refused(hub, lambda: attest(client, gitlab_issuer.gitlab_token(
        now, pipeline_source="external_pull_request_event")), 403, "event_not_allowed")
    lifted = await attest(client, gitlab_issuer.gitlab_token(now, pipeline_source="merge_request_event"))
    assert lifted.status_code == 201 and lifted.json()["counted"] is True


# -- finding 1: which runs may vote, webhook door -------------------------------------------------------------------


async def test_workflow_runs_of_pull_requests_and_other_events_record_nothing(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_GH_SECRET", OWN_SECRET)
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", github_binding(issuer.url, extra="    webhook_secret_env: ACME_GH_SECRET"), {"migrations": [entry]}))
    # The example: a same-repository pull request whose head branch is main.
    variants = [{"event": "pull_request"}, {"event": "pull_request_target"}, {"event": "workflow_run"},
                {"event": "issue_comment"}, {"event": "merge_group", "head_branch": "gh-readonly-queue/main/pr-3"},
                {"event": "pull_request", "head_repository": {"id": 999, "full_name": "evil/api"}},
                {"event": None}, {"event": ["push"]}, {"event": "Push"}]
    for number, variant in enumerate(variants, start=1):
        body = workflow_run(100 + number, **variant)
        reason = "binding_mismatch" if "head_repository" in variant else "event_not_allowed"
        await refused(hub, lambda: hook(client, body, OWN_SECRET, issuer.host), 200, reason=reason)
    # A fork's push-like run on a branch named main is not the bound repository's code.
    fork = workflow_run(120, head_repository={"id": 999, "full_name": "evil/api"})
    await refused(hub, lambda: hook(client, fork, OWN_SECRET, issuer.host), 200, reason="binding_mismatch")
    counted = await hook(client, workflow_run(130, event="schedule"), OWN_SECRET, issuer.host)
    assert counted.status_code == 201 and counted.json()["attestations"][0]["counted"] is True


async def test_allow_events_lifts_an_event_on_the_webhook_door_too(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_GH_SECRET", OWN_SECRET)
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(
        issuer.url, extra="    webhook_secret_env: ACME_GH_SECRET\n    allow_events: [workflow_run]"), {"migrations": [entry]}))
    await refused(hub, lambda: hook(client, workflow_run(1, event="pull_request"), OWN_SECRET, issuer.host), 200,
                  reason="event_not_allowed")
    lifted = await hook(client, workflow_run(2, event="workflow_run"), OWN_SECRET, issuer.host)
    assert lifted.status_code == 201 and lifted.json()["attestations"][0]["counted"] is True


# -- finding 2: the hub-wide secret and per-host repository ids ------------------------------------------------------


async def test_the_hub_wide_secret_speaks_only_for_github_app_bindings(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.config = replace(hub.config, github_webhook_secret=Secret(HUB_SECRET))
    hub.intake.config = hub.config  # the intake was built with the config it reads
    await make_project(hub, "beta")
    monkeypatch.setenv("BETA_GH_SECRET", OWN_SECRET)
    beta_entry = await learn(hub, "beta", "Beta ships on Tuesdays.")
    plain = "\n  - provider: github-actions\n    repository_id: \"123456\"\n    refs: [refs/heads/main]\n"
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", plain, {"migrations": [entry]}))
    own = ("\n  - provider: github-actions\n    repository_id: \"555\"\n    refs: [refs/heads/main]\n"
           "    webhook_secret_env: BETA_GH_SECRET\n")
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", own, {"migrations": [beta_entry]}))
    # No github_app: a delivery signed with the hub secret for acme's (public) repository id records nothing.
    await refused(hub, lambda: hook(client, workflow_run(1), HUB_SECRET, None), 200, reason="github_app_not_enabled")
    await refused(hub, lambda: hook(client, workflow_run(2, event="schedule", run_attempt=3), HUB_SECRET, None), 200,
                  reason="github_app_not_enabled")
    # A binding with its own secret never takes the hub secret.
    beta_run = workflow_run(3)
    beta_run["repository"]["id"] = beta_run["workflow_run"]["head_repository"]["id"] = 555
    await refused(hub, lambda: hook(client, beta_run, HUB_SECRET, None), 200,
                  reason="not_signed_with_the_bindings_secret")
    # Opting in makes the same delivery count.
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", plain + "    github_app: true\n", {"migrations": [entry]}))
    opted = await hook(client, workflow_run(4), HUB_SECRET, None)
    assert opted.status_code == 201 and opted.json()["attestations"][0]["issuer"] == "oidc:token.actions.githubusercontent.com:acme"


async def test_repository_ids_are_bound_per_github_host(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.config = replace(hub.config, github_webhook_secret=Secret(HUB_SECRET))
    hub.intake.config = hub.config  # the intake was built with the config it reads
    await make_project(hub, "beta")
    beta_entry = await learn(hub, "beta", "Beta ships on Tuesdays.")
    monkeypatch.setenv("BETA_GHES_SECRET", OWN_SECRET)
    dotcom = "\n  - provider: github-actions\n    repository_id: \"123456\"\n    refs: [refs/heads/main]\n    github_app: true\n"
    ghes = (f"\n  - provider: github-actions\n    issuer: {GHES}\n    repository_id: \"777\"\n    refs: [refs/heads/main]\n"
            "    github_app: true\n  - provider: github-actions\n"
            f"    issuer: {GHES}\n    repository_id: \"778\"\n    refs: [refs/heads/main]\n    webhook_secret_env: BETA_GHES_SECRET\n")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", dotcom, {"migrations": [entry]}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", ghes, {"migrations": [beta_entry]}))

    def of(repo_id: int, run_id: int) -> dict[str, Any]:
        body = workflow_run(run_id)
        body["repository"]["id"] = body["workflow_run"]["head_repository"]["id"] = repo_id
        return body

    # A github.com id delivered as if from a GitHub Enterprise Server, and the reverse.
    await refused(hub, lambda: hook(client, of(123456, 1), HUB_SECRET, "ghe.example.com"), 200,
                  reason="repository_not_bound")
    await refused(hub, lambda: hook(client, of(777, 2), HUB_SECRET, None), 200, reason="repository_not_bound")
    # A GHES id from another GHES host, or with a port the issuer does not have.
    await refused(hub, lambda: hook(client, of(777, 3), HUB_SECRET, "ghe.other.example"), 200, reason="repository_not_bound")
    await refused(hub, lambda: hook(client, of(777, 4), HUB_SECRET, "ghe.example.com:8443"), 200,
                  reason="repository_not_bound")
    await refused(hub, lambda: hook(client, of(777, 5), HUB_SECRET, ""), 200, reason="repository_not_bound")
    # With the binding's own secret, a delivery of the wrong host finds no binding of its repository there.
    await refused(hub, lambda: hook(client, of(778, 6), OWN_SECRET, None), 200, reason="repository_not_bound")
    right = await hook(client, of(777, 7), HUB_SECRET, "GHE.example.com")
    assert right.status_code == 201 and right.json()["attestations"][0]["issuer"] == "oidc:ghe.example.com:beta"
    own = await hook(client, of(778, 8), OWN_SECRET, "ghe.example.com")
    assert own.status_code == 201


# -- finding 6: refusals name nothing of other projects ---------------------------------------------------------------


def assert_names_nothing_of(body: dict[str, Any], secrets: tuple[str, ...], allowed_numbers: set[str]) -> None:
    text = json.dumps(body)
    for word in secrets:
        assert word not in text, (word, text)
    assert set(re.findall(r"\d+", body["error"]["message"])) <= allowed_numbers, body


async def test_a_foreign_repository_learns_nothing_of_other_projects_bindings(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, issuer: OidcIssuer, gitlab_issuer: OidcIssuer,
        clock: Any) -> None:
    await make_project(hub, "beta")
    acme = ("\n  - provider: github-actions\n"
            f"    issuer: {issuer.url}\n    repository: acme/secret-mirror\n    repository_id: \"42\"\n"
            "    refs: [refs/heads/main]\n" + gitlab_binding(gitlab_issuer.url))
    beta = ("\n  - provider: github-actions\n"
            f"    issuer: {issuer.url}\n    repository: beta/internal-tool\n    repository_id: \"77\"\n"
            "    repository_owner_id: \"7890\"\n    refs: [refs/heads/main]\n")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", acme, {"migrations": [entry]}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", beta, {}))
    now = clock.now()
    secrets = ("acme", "beta", "secret-mirror", "internal-tool", "acme.yaml", "beta.yaml", '"42"', "77", "7890")
    for overrides in ({"repository": "evil/repo", "repository_id": "999", "repository_owner_id": "999"},
                      {"repository": "evil/repo", "repository_id": "999", "repository_owner_id": "999",
                       "event_name": "pull_request"},
                      {"repository": "evil/repo", "repository_id": "999", "repository_owner_id": "999",
                       "ref": "refs/heads/feature"}):
        body = await refused(hub, lambda: attest(client, issuer.github_token(now, **overrides)), 403, "binding_mismatch")
        assert_names_nothing_of(body, secrets, {"999"})
        assert "999" in body["error"]["message"]
    # A GitLab project nobody binds on a shared instance.
    body = await refused(hub, lambda: attest(client, gitlab_issuer.gitlab_token(
        now, project_id="31337", namespace_id="31337", project_path="evil/x")), 403, "binding_mismatch")
    assert_names_nothing_of(body, secrets + ('"72"',), {"31337"})
    # The binding's own repository hears what its binding expects, and where.
    own = await refused(hub, lambda: attest(client, issuer.github_token(now, repository="acme/secret-mirror",
                                                                        repository_id="42", ref="refs/heads/feature")),
                        403, "binding_mismatch")
    assert "refs/heads/main" in own["error"]["message"] and "acme.yaml" in own["error"]["message"]


async def test_a_foreign_subject_learns_nothing_of_generic_oidc_bindings(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, clock: Any) -> None:
    with OidcIssuer() as ci:
        await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
            "acme", f"\n  - provider: oidc\n    issuer: {ci.url}\n    subject: \"repo:acme/hidden-service\"\n",
            {"migrations": [entry]}))
        now = int(clock.now())
        for sub in ("repo:evil/x", "repo:acme/hidden-servic", "repo:acme/hidden-service "):
            token = ci.mint({"iss": ci.url, "aud": "relayroom", "sub": sub, "jti": f"j-{sub}", "iat": now - 5,
                             "nbf": now - 5, "exp": now + 300})
            body = await refused(hub, lambda: attest(client, token), 403, "binding_mismatch")
            # Only the token's own subject comes back: nothing of the bound one, its project or file.
            assert body["error"] == {"code": "binding_mismatch", "claim": "sub",
                                     "message": f"no check map binds this subject (sub {sub!r})"}


async def test_project_mismatch_names_no_project(
        client: Any, hub: Any, entry: str, checkmap_dir: Any, issuer: OidcIssuer, gitlab_issuer: OidcIssuer,
        clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await make_project(hub, "beta")
    key = b"acme-canary-key-0123456789abcdef"
    monkeypatch.setenv("ACME_CANARY", "whsec_" + base64.b64encode(key).decode())
    bindings = (github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url)
                + "\n  - provider: webhook\n    source: acme-canary\n    secret_env: ACME_CANARY\n")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", bindings, {"migrations": [entry]}))
    now = clock.now()
    for token in (issuer.github_token(now), gitlab_issuer.gitlab_token(now)):
        body = await refused(hub, lambda: attest(client, token, project="beta"), 403, "project_mismatch")
        assert "acme" not in json.dumps(body)
    for project in ("beta", "nobody"):
        raw = json.dumps({"check": "migrations", "outcome": "success", "project": project}).encode()
        stamp = int(now)
        headers = {"Content-Type": "application/json", "webhook-id": f"m-{project}", "webhook-timestamp": str(stamp),
                   "webhook-signature": sig.standard_sign(key, f"m-{project}", stamp, raw)}
        body = await refused(hub, lambda: client.post("/v1/webhooks/acme-canary", content=raw, headers=headers), 403,
                             "project_mismatch")
        assert "acme" not in json.dumps(body).replace("acme-canary", "")


def test_allow_events_accepts_any_event_name_and_github_app_only_a_boolean() -> None:
    from gateway.ci.checkmaps.validate import validate_text

    base = "project: acme\nissuers:\n  - provider: github-actions\n    repository_id: \"1\"\n    refs: [refs/heads/main]\n"
    checkmap_, problems = validate_text(base + "    allow_events: [pull_request, issue_comment]\n    github_app: true\n",
                                        "acme.yaml")
    assert problems == [] and checkmap_ is not None
    [binding] = checkmap_.bindings
    assert binding.allow_events == ("pull_request", "issue_comment") and binding.github_app is True
    assert binding.github_host == "github.com"
    for bad in ('    github_app: "true"\n', "    github_app: yes-please\n", "    github_app: 1\n", "    github_app: [true]\n"):
        assert validate_text(base + bad, "acme.yaml")[0] is None, bad
