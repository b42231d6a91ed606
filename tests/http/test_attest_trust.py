"""The trust rule as CI sees it, through a real gateway on 127.0.0.1.

One CI system is one voice however many repositories, workflows, runs and
attempts it has; a second CI system makes K=2; a rerun adds nothing; an
unmapped check is kept without a vote; a contradicted entry stays
contradicted whatever CI says.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx
import pytest

from gateway.ci import webhook_signatures as sig
from gateway.knowledge.model import Principal
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import live_setup, make_project
from tests.support.oidc_issuer import OidcIssuer

CANARY_KEY = b"nightly-canary-key-0123456789"
GH_SECRET = "trust-scenario-github-webhook-secret"


def owner(hub: Any, project: Any) -> Principal:
    return Principal(project, "olivia", "owner")


def prepare(server: Any, folder: Any, map_text: Any) -> tuple[list[str], Any]:
    """Create acme with two candidate entries, write the check map (which
    needs the entry ids) and load it on the server's loop."""

    async def make(hub: Any) -> tuple[list[str], Any]:
        tokens = await make_project(hub, "acme")
        project = await hub.accounts.project("acme")
        ids = []
        for statement in ("Migrations run in staging before production.", "Tests live beside the files they test."):
            entry, _ = await hub.knowledge.learn(Principal(project, "agent-7", "write"), "convention", statement)
            ids.append(entry.id)
        (folder / "acme.yaml").write_text(map_text(ids))
        await hub.checkmaps.refresh(hub.driver)
        return ids, tokens

    return live_setup(server, make)


def entry_state(server: Any, tokens: Any, entry_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/projects/acme/entries/{entry_id}", headers=tokens.auth(tokens.owner))
    assert response.status_code == 200, response.text
    return response.json()


def attest(server: Any, token: str, check: str, outcome: str = "success") -> dict[str, Any]:
    response = httpx.post(f"{server.url}/v1/attestations", json={"check": check, "outcome": outcome},
                          headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201, response.text
    return response.json()


def three_repositories(issuer_url: str) -> str:
    out = ""
    for repo_id, name in (("123456", "acme/api"), ("223344", "acme/web"), ("334455", "acme/infra")):
        out += f"""
  - provider: github-actions
    issuer: {issuer_url}
    repository: {name}
    repository_id: "{repo_id}"
    refs: [refs/heads/main, refs/heads/release]
"""
    return out


def test_one_ci_system_is_one_voice_whatever_its_repositories_workflows_and_runs(
    live_server: Any, checkmap_dir: Any, issuer: OidcIssuer
) -> None:
    ids, tokens = prepare(live_server, checkmap_dir, lambda ids: checkmap(
        "acme", three_repositories(issuer.url), {"migrations": [ids[0]], "migrations-again": [ids[0]]}))
    issuers = set()
    for repo_id, name in (("123456", "acme/api"), ("223344", "acme/web"), ("334455", "acme/infra")):
        for workflow in (".github/workflows/ci.yml", ".github/workflows/nightly.yml"):
            for run_id, attempt, ref in (("1001", "1", "refs/heads/main"), ("1002", "2", "refs/heads/release")):
                for check in ("migrations", "migrations-again"):
                    token = issuer.github_token(time.time(), repository=name, repository_id=repo_id, ref=ref,
                                                workflow_path=workflow, run_id=run_id, run_attempt=attempt)
                    answer = attest(live_server, token, check)
                    assert answer["counted"] is True and answer["promoted"] == []
                    issuers.add(answer["issuer"])
    assert issuers == {f"oidc:{issuer.host}:acme"}
    entry = entry_state(live_server, tokens, ids[0])
    assert entry["state"] == "candidate"
    assert entry["distinct_issuers"] == 1
    assert len(entry["supports"]) == 2  # one per check fingerprint, not per run


def test_two_ci_systems_promote_and_a_rerun_adds_nothing(
    live_server: Any, checkmap_dir: Any, issuer: OidcIssuer, gitlab_issuer: OidcIssuer
) -> None:
    ids, tokens = prepare(live_server, checkmap_dir, lambda ids: checkmap(
        "acme", github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url), {"migrations": [ids[0]]}))
    first = attest(live_server, issuer.github_token(time.time()), "migrations")
    assert first["supports"] == [{"entry_id": ids[0], "duplicate": False}] and first["promoted"] == []
    rerun = attest(live_server, issuer.github_token(time.time(), run_attempt="2"), "migrations")
    assert rerun["supports"] == [{"entry_id": ids[0], "duplicate": True}] and rerun["promoted"] == []
    assert entry_state(live_server, tokens, ids[0])["state"] == "candidate"
    second = attest(live_server, gitlab_issuer.gitlab_token(time.time()), "migrations")
    assert second["issuer"] == f"oidc:{gitlab_issuer.host}:acme"
    assert second["promoted"] == [ids[0]]
    entry = entry_state(live_server, tokens, ids[0])
    assert entry["state"] == "trusted" and entry["promoted_by"] == "issuers" and entry["distinct_issuers"] == 2
    recall = httpx.get(f"{live_server.url}/v1/projects/acme/recall", params={"q": "migrations staging"},
                       headers=tokens.auth(tokens.reader)).json()
    assert [e["id"] for e in recall["entries"]] == [ids[0]]


def test_a_failure_is_recorded_and_promotes_nothing(
    live_server: Any, checkmap_dir: Any, issuer: OidcIssuer, gitlab_issuer: OidcIssuer
) -> None:
    ids, tokens = prepare(live_server, checkmap_dir, lambda ids: checkmap(
        "acme", github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url), {"migrations": [ids[0]]}))
    attest(live_server, issuer.github_token(time.time()), "migrations")
    failed = attest(live_server, gitlab_issuer.gitlab_token(time.time()), "migrations", outcome="failure")
    assert failed["counted"] is False and failed["reason"] == "not_success" and failed["supports"] == []
    entry = entry_state(live_server, tokens, ids[0])
    assert entry["state"] == "candidate" and entry["distinct_issuers"] == 1


def test_an_unmapped_check_is_kept_without_a_vote(live_server: Any, checkmap_dir: Any, issuer: OidcIssuer) -> None:
    ids, tokens = prepare(live_server, checkmap_dir, lambda ids: checkmap(
        "acme", github_binding(issuer.url), {"migrations": [ids[0]]}))
    answer = attest(live_server, issuer.github_token(time.time()), "lint")
    assert answer["counted"] is False and answer["reason"] == "unmapped_check"
    assert answer["supports"] == [] and answer["promoted"] == []

    async def kept(hub: Any) -> list[dict[str, Any]]:
        project = await hub.accounts.project("acme")
        sql = "SELECT check_name, counted, reason, provenance FROM attestations WHERE project_id = ?"
        return await hub.driver.read(lambda q: q.tx.all(sql, project.id))

    rows = live_setup(live_server, kept)
    assert [(r["check_name"], r["counted"], r["reason"]) for r in rows] == [("lint", 0, "unmapped_check")]
    provenance = json.loads(rows[0]["provenance"])
    assert provenance["commit"] and provenance["run_id"] == "8812345678"


def test_a_contradicted_entry_stays_contradicted_whatever_ci_says(
    live_server: Any, checkmap_dir: Any, issuer: OidcIssuer, gitlab_issuer: OidcIssuer
) -> None:
    ids, tokens = prepare(live_server, checkmap_dir, lambda ids: checkmap(
        "acme", github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url), {"migrations": [ids[0]]}))
    refuted = httpx.post(f"{live_server.url}/v1/projects/acme/entries/{ids[0]}/refute", json={"reason": "wrong"},
                         headers=tokens.auth(tokens.owner))
    assert refuted.status_code == 200 and refuted.json()["state"] == "contradicted"
    attest(live_server, issuer.github_token(time.time()), "migrations")
    last = attest(live_server, gitlab_issuer.gitlab_token(time.time()), "migrations")
    assert last["promoted"] == []
    entry = entry_state(live_server, tokens, ids[0])
    assert entry["state"] == "contradicted" and entry["distinct_issuers"] == 2


def test_webhooks_are_voices_too(
    live_server: Any, checkmap_dir: Any, issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub's workflow_run webhook speaks with the same voice as the same
    binding's OIDC tokens; a Standard Webhooks source is a second voice."""
    monkeypatch.setenv("ACME_GH_SECRET", GH_SECRET)
    monkeypatch.setenv("ACME_CANARY_SECRET", "whsec_" + base64.b64encode(CANARY_KEY).decode())
    bindings = (github_binding(issuer.url, extra="    webhook_secret_env: ACME_GH_SECRET")
                + "\n  - provider: webhook\n    source: nightly-canary\n    secret_env: ACME_CANARY_SECRET\n")
    ids, tokens = prepare(live_server, checkmap_dir, lambda ids: checkmap(
        "acme", bindings, {"migrations": [ids[0]], "CI": [ids[1]]}))
    oidc = attest(live_server, issuer.github_token(time.time()), "CI")
    payload = {"action": "completed", "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890}},
               "workflow_run": {"id": 77, "run_attempt": 1, "name": "CI", "conclusion": "success", "event": "push",
                                "head_branch": "main", "head_sha": "abc", "path": ".github/workflows/ci.yml",
                                "head_repository": {"id": 123456}}}
    raw = json.dumps(payload).encode()
    hook = httpx.post(f"{live_server.url}/v1/webhooks/github", content=raw, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "workflow_run", "X-GitHub-Delivery": "1",
        "X-Hub-Signature-256": sig.github_sign(GH_SECRET, raw), "X-GitHub-Enterprise-Host": issuer.host})
    assert hook.status_code == 201, hook.text
    recorded = hook.json()["attestations"][0]
    assert recorded["issuer"] == oidc["issuer"] == f"oidc:{issuer.host}:acme"
    assert recorded["supports"] == [{"entry_id": ids[1], "duplicate": True}]
    assert entry_state(live_server, tokens, ids[1])["distinct_issuers"] == 1

    body = json.dumps({"check": "CI", "outcome": "success"}).encode()
    now = int(time.time())
    canary = httpx.post(f"{live_server.url}/v1/webhooks/nightly-canary", content=body, headers={
        "Content-Type": "application/json", "webhook-id": "msg_1", "webhook-timestamp": str(now),
        "webhook-signature": "v1,bm90LXRoaXMtb25lLWl0cy1hLXJvdGF0ZWQtb2xkLWtleQ== "
                             + sig.standard_sign(CANARY_KEY, "msg_1", now, body)})
    assert canary.status_code == 201, canary.text
    assert canary.json()["issuer"] == "webhook:nightly-canary:acme"
    assert canary.json()["promoted"] == [ids[1]]
    again = httpx.post(f"{live_server.url}/v1/webhooks/nightly-canary", content=body, headers={
        "Content-Type": "application/json", "webhook-id": "msg_1", "webhook-timestamp": str(now),
        "webhook-signature": sig.standard_sign(CANARY_KEY, "msg_1", now, body)})
    assert again.status_code == 200 and again.json()["recorded"] is False
    assert entry_state(live_server, tokens, ids[1])["state"] == "trusted"
