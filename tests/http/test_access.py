"""The access matrix of README, Access levels, endpoint by endpoint and level by
level, plus project isolation and missing or bad credentials."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import ProjectTokens, make_project
from tests.support.helpers import bearer, learn, snapshot

# (method, path template, json body or None, minimum level)
ENDPOINTS = [
    ("POST", "/v1/projects/{p}/entries", {"kind": "fact", "statement": "Matrix fact {n}."}, "write"),
    ("GET", "/v1/projects/{p}/entries", None, "read"),
    ("GET", "/v1/projects/{p}/entries/{trusted}", None, "read"),
    ("POST", "/v1/projects/{p}/entries/{candidate}/confirm", None, "owner"),
    ("POST", "/v1/projects/{p}/entries/{trusted}/refute", {"reason": "wrong"}, "owner"),
    ("POST", "/v1/projects/{p}/events", {"type": "note", "detail": {}}, "write"),
    ("GET", "/v1/projects/{p}/recall?q=matrix", None, "read"),
    ("GET", "/v1/projects/{p}/audit", None, "owner"),
    ("GET", "/v1/projects/{p}/settings", None, "owner"),
    ("PATCH", "/v1/projects/{p}/settings", {"playbook_top_n": 10}, "owner"),
    ("GET", "/v1/projects/{p}/playbook", None, "read"),
    ("PUT", "/v1/projects/{p}/playbook", "# playbook", "owner"),
    ("GET", "/v1/projects/{p}/learning", None, "owner"),
    ("POST", "/v1/projects/{p}/threads/t-{n}/messages", {"author": "a", "text": "Pitfall: matrix message {n} is durable."}, "write"),
    ("POST", "/v1/projects/{p}/proposals", {"kind": "fact", "statement": "Matrix proposal {n}.", "rationale": "seen"}, "write"),
    ("GET", "/v1/projects/{p}/proposals", None, "owner"),
]
LEVELS = ["read", "write", "owner"]
RANK = {name: i for i, name in enumerate(LEVELS)}


async def _fixtures(client: httpx.AsyncClient, acme: ProjectTokens, n: int) -> dict[str, str]:
    candidate = await learn(client, "acme", acme.owner, f"Candidate for the matrix {n}.")
    trusted = await learn(client, "acme", acme.owner, f"Trusted for the matrix {n}.")
    await client.post(f"/v1/projects/acme/entries/{trusted['id']}/confirm", headers=bearer(acme.owner))
    return {"p": "acme", "candidate": candidate["id"], "trusted": trusted["id"], "n": str(n)}


async def _call(client: httpx.AsyncClient, method: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    if isinstance(body, str):
        return await client.request(method, path, content=body, headers={**headers, "Content-Type": "text/markdown"})
    if body is None:
        return await client.request(method, path, headers=headers)
    return await client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("level", LEVELS)
async def test_access_matrix(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, level: str) -> None:
    token = {"read": acme.reader, "write": acme.writer, "owner": acme.owner}[level]
    for n, (method, template, body, needed) in enumerate(ENDPOINTS):
        ids = await _fixtures(client, acme, n)
        path = template.format(**ids)
        payload = body.format(**ids) if isinstance(body, str) else (
            {k: (v.format(**ids) if isinstance(v, str) else v) for k, v in body.items()} if body else None
        )
        before = await snapshot(hub)
        r = await _call(client, method, path, payload, bearer(token))
        if RANK[level] >= RANK[needed]:
            assert r.status_code < 400, (method, path, level, r.text)
        else:
            assert r.status_code == 403, (method, path, level, r.text)
            assert r.json()["error"]["code"] == "insufficient_level"
            assert needed in r.json()["error"]["message"]
            assert await snapshot(hub) == before, (method, path, level)


async def test_no_or_bad_credential_is_401(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    ids = await _fixtures(client, acme, 99)
    before = await snapshot(hub)
    for method, template, body, _ in ENDPOINTS:
        path = template.format(**ids)
        for headers in ({}, {"Authorization": "Bearer rr_not-a-token"}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "}):
            r = await _call(client, method, path, body if not isinstance(body, dict) else {"x": 1}, headers)
            assert r.status_code == 401, (method, path, headers, r.text)
            assert r.json()["error"]["code"] in ("missing_credential", "invalid_token")
    assert await snapshot(hub) == before


async def test_revoked_token_is_401(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    assert (await client.get("/v1/projects/acme/entries", headers=bearer(acme.writer))).status_code == 200
    assert await hub.accounts.revoke_tokens("acme", "agent-7") == 1
    r = await client.get("/v1/projects/acme/entries", headers=bearer(acme.writer))
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token"


async def test_a_token_of_project_a_is_worth_nothing_in_b(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    beta = await make_project(hub, "beta")
    beta_entry = await learn(client, "beta", beta.owner, "Beta's fact.")
    await client.post(f"/v1/projects/beta/entries/{beta_entry['id']}/confirm", headers=bearer(beta.owner))
    before = await snapshot(hub)
    for method, template, body, _ in ENDPOINTS:
        path = template.format(p="beta", candidate=beta_entry["id"], trusted=beta_entry["id"], n="0")
        r = await _call(client, method, path, body, bearer(acme.owner))
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"]["code"] == "project_not_found"
    # an unknown project and another's project answer alike
    missing = await client.get("/v1/projects/nope/entries", headers=bearer(acme.owner))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "project_not_found"
    assert await snapshot(hub) == before
    # and acme's own entry ids are not reachable through beta's tokens either
    mine = await learn(client, "acme", acme.writer, "Acme only.")
    assert (await client.get(f"/v1/projects/beta/entries/{mine['id']}", headers=bearer(beta.owner))).status_code == 404
    assert (await client.get(f"/v1/projects/acme/entries/{beta_entry['id']}", headers=bearer(acme.owner))).status_code == 404


async def test_principal_sees_own_entries_in_every_state(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    mine = await learn(client, "acme", acme.writer, "My own refuted entry.")
    await client.post(f"/v1/projects/acme/entries/{mine['id']}/refute", json={"reason": "no"}, headers=bearer(acme.owner))
    assert (await client.get(f"/v1/projects/acme/entries/{mine['id']}", headers=bearer(acme.writer))).json()["state"] == "contradicted"
    assert (await client.get(f"/v1/projects/acme/entries/{mine['id']}", headers=bearer(acme.other_writer))).status_code == 404
    listing = await client.get("/v1/projects/acme/entries", params={"state": "contradicted"}, headers=bearer(acme.writer))
    assert [e["id"] for e in listing.json()["entries"]] == [mine["id"]]
    others = await client.get("/v1/projects/acme/entries", params={"state": "contradicted"}, headers=bearer(acme.other_writer))
    assert others.json()["entries"] == []
