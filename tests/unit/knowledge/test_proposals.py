"""Reflection proposals: agents propose, owners decide once; approval makes
a candidate (created_via reflection), never a trusted entry."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.helpers import audit_actions, bearer, snapshot

PROPOSAL = {"kind": "pitfall", "statement": "Renaming a CI check silently unmaps it.", "rationale": "lint stopped voting"}


async def _propose(client: Any, token: str, body: dict[str, Any] | None = None) -> Any:
    return await client.post("/v1/projects/acme/proposals", json=body or PROPOSAL, headers=bearer(token))


async def test_an_agent_proposes_and_the_owner_lists(client: Any, acme: Any) -> None:
    r = await _propose(client, acme.writer)
    assert r.status_code == 201, r.text
    proposal = r.json()
    assert proposal["state"] == "pending" and proposal["proposed_by"] == "agent-7"
    assert proposal["id"].startswith("pr_") and proposal["entry_id"] is None
    listing = await client.get("/v1/projects/acme/proposals", headers=bearer(acme.owner))
    assert listing.status_code == 200
    assert [p["id"] for p in listing.json()["proposals"]] == [proposal["id"]]
    pending = await client.get("/v1/projects/acme/proposals?state=pending", headers=bearer(acme.owner))
    assert len(pending.json()["proposals"]) == 1
    rejected = await client.get("/v1/projects/acme/proposals?state=rejected", headers=bearer(acme.owner))
    assert rejected.json()["proposals"] == []


async def test_approval_registers_a_candidate_by_the_proposer(client: Any, acme: Any, hub: Any) -> None:
    proposal = (await _propose(client, acme.writer)).json()
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/approve", headers=bearer(acme.owner))
    assert r.status_code == 201, r.text
    entry = r.json()
    assert entry["state"] == "candidate"
    assert entry["created_via"] == "reflection"
    assert entry["created_by"] == "agent-7"
    assert entry["statement"] == PROPOSAL["statement"] and entry["kind"] == "pitfall"
    assert entry["provenance"]["proposal_id"] == proposal["id"]
    assert await audit_actions(hub, "acme", entry["id"]) == ["learn", "approve_proposal"]
    # the proposer sees its own candidate; the proposal now names the entry
    assert (await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.writer))).status_code == 200
    listed = (await client.get("/v1/projects/acme/proposals", headers=bearer(acme.owner))).json()["proposals"][0]
    assert listed["state"] == "approved" and listed["entry_id"] == entry["id"] and listed["decided_by"] == "olivia"


async def test_a_proposal_is_decided_once(client: Any, acme: Any, hub: Any) -> None:
    first = (await _propose(client, acme.writer)).json()
    second = (await _propose(client, acme.writer, {**PROPOSAL, "statement": "Another thing worth keeping here."})).json()
    assert (await client.post(f"/v1/projects/acme/proposals/{first['id']}/approve", headers=bearer(acme.owner))).status_code == 201
    r = await client.post(f"/v1/projects/acme/proposals/{second['id']}/reject", json={"reason": "not durable"}, headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["state"] == "rejected" and r.json()["reason"] == "not durable"
    stored = (await client.get("/v1/projects/acme/proposals?state=rejected", headers=bearer(acme.owner))).json()["proposals"]
    assert stored == [r.json()]  # the answer is the proposal as stored, decided_at and decided_by included
    assert r.json()["decided_by"] == "olivia" and r.json()["decided_at"] is not None
    before = await snapshot(hub)
    for proposal_id in (first["id"], second["id"]):
        for action, body in (("approve", None), ("reject", {"reason": "again"})):
            r = await client.post(
                f"/v1/projects/acme/proposals/{proposal_id}/{action}", json=body, headers=bearer(acme.owner)
            )
            assert r.status_code == 409 and r.json()["error"]["code"] == "proposal_decided"
    assert await snapshot(hub) == before
    actions = await audit_actions(hub, "acme")
    assert actions.count("approve_proposal") == 1 and actions.count("reject_proposal") == 1


async def test_approving_a_statement_already_live_links_to_it(client: Any, acme: Any) -> None:
    existing = (
        await client.post(
            "/v1/projects/acme/entries", json={"kind": "pitfall", "statement": PROPOSAL["statement"]}, headers=bearer(acme.writer)
        )
    ).json()
    proposal = (await _propose(client, acme.writer)).json()
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/approve", headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["duplicate"] is True and r.json()["id"] == existing["id"]


@pytest.mark.parametrize("backend", ["sqlite"])  # input checks: the store makes no difference
@pytest.mark.parametrize("who", ["reader", "writer", "other_writer"])
async def test_only_owners_list_and_decide(client: Any, acme: Any, who: str) -> None:
    proposal = (await _propose(client, acme.writer)).json()
    token = getattr(acme, who)
    assert (await client.get("/v1/projects/acme/proposals", headers=bearer(token))).status_code == 403
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/approve", headers=bearer(token))
    assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_level"
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/reject", json={"reason": "x"}, headers=bearer(token))
    assert r.status_code == 403


@pytest.mark.parametrize("backend", ["sqlite"])  # input checks: the store makes no difference
async def test_readers_cannot_propose_and_other_projects_see_nothing(client: Any, acme: Any, hub: Any) -> None:
    from tests.conftest import make_project

    other = await make_project(hub, "other")
    assert (await _propose(client, acme.reader)).status_code == 403
    proposal = (await _propose(client, acme.writer)).json()
    r = await client.post(f"/v1/projects/other/proposals/{proposal['id']}/approve", headers=bearer(other.owner))
    assert r.status_code == 404 and r.json()["error"]["code"] == "proposal_not_found"
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/approve", headers=bearer(other.owner))
    assert r.status_code == 404


@pytest.mark.parametrize("backend", ["sqlite"])  # input checks: the store makes no difference
@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"kind": "pitfall", "statement": "x y z"}, "missing_field"),
        ({**PROPOSAL, "state": "trusted"}, "unknown_field"),
        ({**PROPOSAL, "kind": "rumour"}, "invalid_kind"),
        ({**PROPOSAL, "statement": ""}, "invalid_field"),
        ({**PROPOSAL, "rationale": None}, "invalid_field"),
        ({**PROPOSAL, "statement": "s" * 2001}, "invalid_field"),
    ],
)
async def test_bad_proposals_are_refused_and_change_nothing(client: Any, acme: Any, hub: Any, body: dict[str, Any], code: str) -> None:
    before = await snapshot(hub)
    r = await _propose(client, acme.writer, body)
    assert r.status_code == 422 and r.json()["error"]["code"] == code
    assert await snapshot(hub) == before


async def test_bad_decisions_are_refused(client: Any, acme: Any, hub: Any) -> None:
    proposal = (await _propose(client, acme.writer)).json()
    before = await snapshot(hub)
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/reject", json={}, headers=bearer(acme.owner))
    assert r.status_code == 422 and r.json()["error"]["code"] == "missing_field"
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/reject", json={"reason": ""}, headers=bearer(acme.owner))
    assert r.status_code == 422
    r = await client.post(f"/v1/projects/acme/proposals/{proposal['id']}/approve", json={"state": "trusted"}, headers=bearer(acme.owner))
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_field"
    r = await client.post("/v1/projects/acme/proposals/pr_nope/approve", headers=bearer(acme.owner))
    assert r.status_code == 404
    r = await client.get("/v1/projects/acme/proposals?state=maybe", headers=bearer(acme.owner))
    assert r.status_code == 422
    r = await client.get("/v1/projects/acme/proposals?cursor=%%%", headers=bearer(acme.owner))
    assert r.status_code == 422
    assert await snapshot(hub) == before


async def test_listing_pages_with_a_cursor(client: Any, acme: Any) -> None:
    ids = [(await _propose(client, acme.writer, {**PROPOSAL, "statement": f"Durable thing number {i}"})).json()["id"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        url = "/v1/projects/acme/proposals?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = (await client.get(url, headers=bearer(acme.owner))).json()
        seen += [p["id"] for p in page["proposals"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
