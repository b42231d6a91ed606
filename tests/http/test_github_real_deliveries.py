"""GitHub's real deliveries, and visible check names (issue 33, finding 4).

GitHub marks a hook failing on any answer other than 2xx, and maintainers
chase red deliveries.  So a signed delivery that records nothing answers
2xx with its reason: an event that may not vote, an action other than
completed, a repository no binding takes, an empty or over-long workflow
name, a field missing or null.  Only a bad signature (401), a body over
1 MiB (413) and a body that is not JSON (400) are refused.

The payloads below have the shapes of GitHub's documented examples (the
octokit/webhooks payload examples): a `workflow_run` whose `name` is empty
and which predates `run_attempt` and `path`, an organisation's `ping` with
no repository, the REST form of a workflow path (`...yml@main`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import httpx
import pytest

from gateway.ci import webhook_signatures as sig
from gateway.core.config import Secret
from tests.support.attest_fixtures import checkmap, learn, write_map
from tests.support.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.support.helpers import snapshot
from tests.support.oidc_issuer import OidcIssuer

OWN_SECRET = "acme-own-webhook-secret-0123"
HUB_SECRET = "the-operators-github-app-secret"
REPO_ID = 300029405


def octo_repository() -> dict[str, Any]:
    return {"id": REPO_ID, "node_id": "MDEwOlJlcG9zaXRvcnkzMDAwMjk0MDU=", "name": "octo-repo",
            "full_name": "octo-org/octo-repo", "private": False, "fork": False, "default_branch": "main",
            "owner": {"login": "octo-org", "id": 41548062, "type": "Organization"}}


def documented_run() -> dict[str, Any]:
    """A completed `workflow_run` shaped as GitHub's own example: an empty
    `name`, a `repository_dispatch` event, no `run_attempt` nor `path` (the
    workflow's path is on the top-level `workflow` object only)."""
    return {
        "action": "completed",
        "organization": {"login": "octo-org", "id": 41548062},
        "repository": octo_repository(),
        "sender": {"login": "Codertocat", "id": 15669918, "type": "User"},
        "workflow": {"id": 2823525, "name": "test", "path": ".github/workflows/test.yml", "state": "active"},
        "workflow_run": {
            "name": "", "id": 289782451, "run_number": 163, "event": "repository_dispatch", "status": "completed",
            "conclusion": "success", "head_branch": "main", "head_sha": "3484a3fb816e0859fd6e1cea078d76385ff50625",
            "html_url": "https://github.com/octo-org/octo-repo/actions/runs/289782451", "pull_requests": [],
            "head_repository": {"id": REPO_ID, "full_name": "octo-org/octo-repo"},
            "repository": {"id": REPO_ID, "full_name": "octo-org/octo-repo"},
            "workflow_id": 2823525,
        },
    }


def voting_run(**run: Any) -> dict[str, Any]:
    """The same delivery as a run that may vote: a push to main, named, with
    `run_attempt` and the REST form of its path."""
    body = documented_run()
    body["workflow_run"].update({"name": "migrations", "event": "push", "run_attempt": 1,
                                 "path": ".github/workflows/test.yml@main"})
    body["workflow_run"].update(run)
    return body


def binding(extra: str = "") -> str:
    return f"""
  - provider: github-actions
    repository: octo-org/octo-repo
    repository_id: "{REPO_ID}"
    repository_owner_id: "41548062"
    refs: [refs/heads/main]
    workflows: [.github/workflows/test.yml]
    webhook_secret_env: ACME_GH_SECRET
{extra}"""


async def deliver(client: httpx.AsyncClient, body: Any, secret: str, event: str = "workflow_run", *,
                  raw: bytes | None = None, content_type: str = "application/json") -> httpx.Response:
    data = raw if raw is not None else json.dumps(body).encode()
    return await client.post("/v1/webhooks/github", content=data, headers={
        "Content-Type": content_type, "X-GitHub-Event": event, "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-GitHub-Hook-ID": "292430182", "X-Hub-Signature-256": sig.github_sign(secret, data)})


@pytest.fixture
async def entry(hub: Any, acme: Any, checkmap_dir: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ACME_GH_SECRET", OWN_SECRET)
    kn = await learn(hub, "acme", "Migrations run in staging first.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", binding(), {"migrations": [kn]},
                                                             {"migrations": "workflows: [.github/workflows/test.yml]"}))
    return kn


async def records_nothing(hub: Any, send: Any, reason: str | None = None) -> dict[str, Any]:
    before = await snapshot(hub)
    response = await send()
    assert 200 <= response.status_code < 300, response.text
    body = response.json()
    assert body["recorded"] is False, body
    if reason is not None:
        assert body["reason"] == reason, body
    assert await snapshot(hub) == before
    return body


# -- signed deliveries that record nothing answer 2xx -----------------------------------------------------


async def test_githubs_documented_workflow_run_is_answered_200(client: httpx.AsyncClient, hub: Any, entry: str) -> None:
    await records_nothing(hub, lambda: deliver(client, documented_run(), OWN_SECRET), "incomplete_workflow_run")


@pytest.mark.parametrize("name,reason", [
    ("", "invalid_check"),
    ("x" * 201, "invalid_check"),
    ("migra\ntions", "invalid_check"),
    ("migrations\U000e0041\U000e0042", "invisible_text"),
    ("migrations\u202e", "invisible_text"),
    ("migrations\u200b", "invisible_text"),
    (None, "invalid_check"),
    (7, "invalid_check"),
])
async def test_a_run_whose_name_cannot_be_a_check_records_nothing(client: httpx.AsyncClient, hub: Any, entry: str,
                                                                  name: Any, reason: str) -> None:
    body = await records_nothing(hub, lambda: deliver(client, voting_run(name=name), OWN_SECRET), reason)
    if reason == "invisible_text":
        assert "U+" in body["detail"] and "at character 11" in body["detail"]


MISSING = [("workflow_run", "id"), ("workflow_run", "run_attempt"), ("workflow_run", "name"),
           ("workflow_run", "conclusion"), ("workflow_run", "event"), ("workflow_run", "head_branch"),
           ("workflow_run", "path"), ("workflow_run", "head_repository"), ("repository", "owner"),
           ("repository", "full_name"), (None, "workflow_run"), (None, "action")]


@pytest.mark.parametrize("how", ["missing", "null"])
@pytest.mark.parametrize("parent,field", MISSING, ids=[f"{p}.{f}" for p, f in MISSING])
async def test_a_field_missing_or_null_records_nothing(client: httpx.AsyncClient, hub: Any, entry: str,
                                                       parent: str | None, field: str, how: str) -> None:
    body = voting_run()
    holder = body if parent is None else body[parent]
    if how == "missing":
        del holder[field]
    else:
        holder[field] = None
    await records_nothing(hub, lambda: deliver(client, body, OWN_SECRET))


@pytest.mark.parametrize("change,reason", [
    ({"event": "pull_request"}, "event_not_allowed"),
    ({"event": "repository_dispatch"}, "event_not_allowed"),
    ({"head_branch": "feature"}, "binding_mismatch"),
    ({"path": ".github/workflows/other.yml@main"}, "binding_mismatch"),
    ({"head_repository": {"id": 1, "full_name": "fork/octo-repo"}}, "binding_mismatch"),
    ({"conclusion": "x" * 41}, "invalid_outcome"),
    ({"run_attempt": "1"}, "incomplete_workflow_run"),
])
async def test_runs_that_may_not_vote_are_answered_200(client: httpx.AsyncClient, hub: Any, entry: str,
                                                       change: dict[str, Any], reason: str) -> None:
    await records_nothing(hub, lambda: deliver(client, voting_run(**change), OWN_SECRET), reason)


async def test_other_actions_events_and_repositories_are_answered_200(client: httpx.AsyncClient, hub: Any,
                                                                      entry: str) -> None:
    for action in ("requested", "in_progress"):
        await records_nothing(hub, lambda: deliver(client, {**voting_run(), "action": action}, OWN_SECRET),
                              "action_not_completed")
    for event in ("push", "pull_request", "check_suite", "workflow_job"):
        await records_nothing(hub, lambda: deliver(client, voting_run(), OWN_SECRET, event))
    other = voting_run()
    other["repository"]["id"] = 42  # an organisation hook sees every repository of the organisation
    await records_nothing(hub, lambda: deliver(client, other, OWN_SECRET), "repository_not_bound")


async def test_a_map_naming_a_missing_project_answers_200(client: httpx.AsyncClient, hub: Any, checkmap_dir: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_GH_SECRET", OWN_SECRET)
    await write_map(hub, checkmap_dir, "ghost.yaml", checkmap("ghost", binding(), {}))
    await records_nothing(hub, lambda: deliver(client, voting_run(), OWN_SECRET), "project_not_found")


# -- what is refused ---------------------------------------------------------------------------------------


async def test_only_a_bad_signature_a_non_json_body_or_a_big_one_is_refused(client: httpx.AsyncClient, hub: Any,
                                                                           entry: str) -> None:
    before = await snapshot(hub)
    raw = json.dumps(voting_run()).encode()
    bad = await client.post("/v1/webhooks/github", content=raw, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "workflow_run",
        "X-Hub-Signature-256": sig.github_sign("not-a-secret-of-this-hub", raw)})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_signature"
    unsigned = await client.post("/v1/webhooks/github", content=raw, headers={"X-GitHub-Event": "ping"})
    assert unsigned.status_code == 401
    form = b"payload=" + raw  # a hook set to form encoding: signed, but not JSON
    not_json = await deliver(client, None, OWN_SECRET, raw=form, content_type="application/x-www-form-urlencoded")
    assert not_json.status_code == 400 and "application/json" in not_json.json()["error"]["message"]
    array = await deliver(client, None, OWN_SECRET, raw=b"[]")
    assert array.status_code == 400
    big = json.dumps({**voting_run(), "padding": "x" * (1024 * 1024)}).encode()
    too_big = await deliver(client, None, OWN_SECRET, raw=big)
    assert too_big.status_code == 413
    assert await snapshot(hub) == before
    # A signed JSON delivery is judged by its body, whatever Content-Type says.
    plain = await deliver(client, voting_run(), OWN_SECRET, content_type="text/plain")
    assert plain.status_code == 201


# -- path@ref ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [".github/workflows/test.yml@main", ".github/workflows/test.yml@refs/heads/main",
                                  ".github/workflows/test.yml"])
async def test_the_rest_form_of_a_workflow_path_matches_the_maps_workflows(client: httpx.AsyncClient, hub: Any,
                                                                            entry: str, path: str) -> None:
    response = await deliver(client, voting_run(path=path), OWN_SECRET)
    assert response.status_code == 201, response.text
    [attestation] = response.json()["attestations"]
    assert attestation["counted"] is True and attestation["supports"] == [{"entry_id": entry, "duplicate": False}]


# -- an organisation's ping ------------------------------------------------------------------------------------


def org_ping() -> dict[str, Any]:
    """An organisation hook's ping: it names the organisation, no repository."""
    return {"zen": "Anything added dilutes everything else.", "hook_id": 109948940,
            "hook": {"type": "Organization", "id": 266738161, "name": "web", "active": True,
                     "events": ["workflow_run"], "config": {"content_type": "json", "insecure_ssl": "0",
                                                            "secret": "********", "url": "https://relayroom.example.com"}},
            "organization": {"login": "octo-org", "id": 41548062},
            "sender": {"login": "Codertocat", "id": 21031067, "type": "User"}}


async def test_an_organisations_ping_signed_with_a_bindings_secret_answers_200(client: httpx.AsyncClient, hub: Any,
                                                                               entry: str) -> None:
    ping = await deliver(client, org_ping(), OWN_SECRET, "ping")
    assert ping.status_code == 200 and ping.json() == {"event": "ping", "recorded": False}
    assert (await deliver(client, org_ping(), "a-secret-nobody-configured", "ping")).status_code == 401


async def test_an_organisations_ping_signed_with_the_hub_secret_answers_200(client: httpx.AsyncClient, hub: Any,
                                                                            entry: str) -> None:
    hub.config = replace(hub.config, github_webhook_secret=Secret(HUB_SECRET))
    hub.intake.config = hub.config  # the intake was built with the config it reads
    ping = await deliver(client, org_ping(), HUB_SECRET, "ping")
    assert ping.status_code == 200 and ping.json()["recorded"] is False
    # The hub secret answers for the ping; it still votes for no binding that did not opt in.
    await records_nothing(hub, lambda: deliver(client, voting_run(), HUB_SECRET), "not_signed_with_the_bindings_secret")


async def test_a_ping_names_no_repository_so_the_hub_tries_each_secret_once(
        client: httpx.AsyncClient, hub: Any, checkmap_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several bindings may hold the same secret value: each distinct value is tried, one HMAC each."""
    calls: list[str] = []
    real = sig.github_valid

    def counted(secret: str, body: bytes, header: str | None) -> bool:
        calls.append(secret)
        return real(secret, body, header)

    monkeypatch.setattr(sig, "github_valid", counted)
    texts = []
    for index in range(5):
        monkeypatch.setenv(f"SECRET_{index}", OWN_SECRET if index < 3 else f"another-secret-value-{index}")
        texts.append(f'\n  - provider: github-actions\n    repository_id: "{index + 1}"\n    refs: [refs/heads/main]\n'
                     f"    webhook_secret_env: SECRET_{index}\n")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", "".join(texts), {}))
    assert (await deliver(client, org_ping(), "a-secret-nobody-configured", "ping")).status_code == 401
    assert sorted(calls) == sorted([OWN_SECRET, "another-secret-value-3", "another-secret-value-4"])


# -- Standard Webhooks secrets without padding ---------------------------------------------------------------


@pytest.mark.parametrize("length", [16, 17, 18, 24, 32])
def test_a_whsec_secret_reads_the_same_with_or_without_padding(length: int) -> None:
    key = bytes(range(40, 40 + length))
    padded = base64.b64encode(key).decode()
    assert sig.standard_key("whsec_" + padded) == key
    assert sig.standard_key("whsec_" + padded.rstrip("=")) == key
    assert sig.standard_key("whsec_" + "A" * 25) is None  # no base64 is 4n+1 characters long
    assert sig.standard_key("whsec_" + padded[:-1] + "!") is None


async def test_a_standard_webhooks_sender_with_an_unpadded_secret_is_heard(client: httpx.AsyncClient, hub: Any,
                                                                           acme: Any, checkmap_dir: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    key = b"canary-key-0123456789abcdefg"  # 28 bytes: its base64 ends in one "="
    monkeypatch.setenv("CANARY", "whsec_" + base64.b64encode(key).decode().rstrip("="))
    await write_map(hub, checkmap_dir, "acme.yaml",
                    "project: acme\nissuers:\n  - provider: webhook\n    source: canary\n    secret_env: CANARY\n")
    now = int(hub.clock.now())
    raw = json.dumps({"check": "nightly", "outcome": "success"}).encode()
    response = await client.post("/v1/webhooks/canary", content=raw, headers={
        "Content-Type": "application/json", "webhook-id": "msg_1", "webhook-timestamp": str(now),
        "webhook-signature": sig.standard_sign(key, "msg_1", now, raw)})
    assert response.status_code == 201, response.text


# -- a check name holds visible text only ------------------------------------------------------------------------


INVISIBLE = ["migrations\U000e0053\U000e0059", "migra\u202etions", "migrations\u200d", "\ufeffmigrations",
             "migrations\u2066x\u2069"]


@pytest.mark.parametrize("check", INVISIBLE)
async def test_an_attestation_check_with_an_invisible_character_is_422(client: httpx.AsyncClient, hub: Any,
                                                                       acme: Any, checkmap_dir: Any,
                                                                       issuer: OidcIssuer, check: str) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", f"""
  - provider: github-actions
    issuer: {issuer.url}
    repository_id: "123456"
    refs: [refs/heads/main]
""", {}))
    before = await snapshot(hub)
    response = await client.post("/v1/attestations", json={"check": check, "outcome": "success"},
                                 headers={"Authorization": f"Bearer {issuer.github_token(hub.clock.now())}"})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invisible_text", response.text
    position = next(i for i, c in enumerate(check, 1) if c not in "migrationsx")
    assert f"U+{ord(check[position - 1]):04X} at character {position}" in response.json()["error"]["message"]
    assert await snapshot(hub) == before


@pytest.mark.parametrize("check", INVISIBLE)
async def test_a_standard_webhooks_check_with_an_invisible_character_is_422(client: httpx.AsyncClient, hub: Any,
                                                                            acme: Any, checkmap_dir: Any,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            check: str) -> None:
    key = b"canary-key-0123456789abcdef"
    monkeypatch.setenv("CANARY", "whsec_" + base64.b64encode(key).decode())
    await write_map(hub, checkmap_dir, "acme.yaml",
                    "project: acme\nissuers:\n  - provider: webhook\n    source: canary\n    secret_env: CANARY\n")
    now = int(hub.clock.now())
    raw = json.dumps({"check": check, "outcome": "success"}).encode()
    before = await snapshot(hub)
    response = await client.post("/v1/webhooks/canary", content=raw, headers={
        "Content-Type": "application/json", "webhook-id": "msg_2", "webhook-timestamp": str(now),
        "webhook-signature": sig.standard_sign(key, "msg_2", now, raw)})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invisible_text", response.text
    assert await snapshot(hub) == before

