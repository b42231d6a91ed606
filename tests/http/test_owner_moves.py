"""The owner's moves beyond confirm and refute, over REST as an owner's
script would call them: retire now, an expiry, a correction that replaces
an entry once it is trusted, and a move on several entries at once.  Then
the same endpoints as an attacker holding a writer or reader token (or
another project's owner token) would try them: refused, nothing changed."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.clock import DAY
from tests.conftest import make_project
from tests.support.helpers import audit_actions, bearer, learn, settle, snapshot, support

P = "/v1/projects/acme"


async def _trusted(client: Any, acme: Any, statement: str, kind: str = "pitfall") -> str:
    entry_id: str = (await learn(client, "acme", acme.writer, statement, kind=kind))["id"]
    r = await client.post(f"{P}/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["state"] == "trusted"
    return entry_id


async def _get(client: Any, acme: Any, entry_id: str) -> dict[str, Any]:
    r = await client.get(f"{P}/entries/{entry_id}", headers=bearer(acme.owner))
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


async def _recalled(client: Any, acme: Any, query: str) -> list[str]:
    r = await client.get(f"{P}/recall", params={"q": query}, headers=bearer(acme.reader))
    return [e["id"] for e in r.json()["entries"]]


async def _audit(hub: Any, entry_id: str) -> list[dict[str, Any]]:
    project = await hub.accounts.project("acme")
    rows = await hub.driver.read(lambda q: q.audit_rows(project.id, entry_id=entry_id, limit=100))
    return list(reversed(rows))


# -- who confirmed it ------------------------------------------------------------------------


async def test_an_owner_confirmed_entry_names_its_owner_among_those_who_vouch(client: Any, acme: Any, hub: Any) -> None:
    entry_id = await _trusted(client, acme, "The pooler cannot do prepared statements.")
    entry = await _get(client, acme, entry_id)
    assert entry["promoted_by"] == "owner:olivia"
    assert entry["vouched_by"] == ["owner:olivia"]
    assert entry["distinct_issuers"] == 0  # CI issuers: the count against K is unchanged

    candidate = (await learn(client, "acme", acme.writer, "Migrations are named by date.", kind="convention"))["id"]
    await support(hub, "acme", candidate, "oidc:ci.example.com:acme")
    assert (await _get(client, acme, candidate))["vouched_by"] == ["oidc:ci.example.com:acme"]


# -- retire now ------------------------------------------------------------------------------


async def test_retire_takes_a_trusted_entry_out_of_recall_at_once_and_for_good(client: Any, acme: Any, hub: Any) -> None:
    entry_id = await _trusted(client, acme, "The pooler cannot do prepared statements.")
    assert entry_id in await _recalled(client, acme, "pooler prepared statements")

    r = await client.post(f"{P}/entries/{entry_id}/retire", json={"reason": "we left the pooler"}, headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["state"] == "retired"
    assert entry_id not in await _recalled(client, acme, "pooler prepared statements")
    row = (await _audit(hub, entry_id))[-1]
    assert row["action"] == "retire" and row["actor"] == "olivia"
    assert row["detail"] == {"from": "trusted", "via": "owner", "reason": "we left the pooler"}

    await settle(hub)
    before = await snapshot(hub)
    again = await client.post(f"{P}/entries/{entry_id}/retire", headers=bearer(acme.owner))
    assert again.status_code == 409 and again.json()["error"]["code"] == "entry_retired"
    confirm = await client.post(f"{P}/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    assert confirm.status_code == 409 and confirm.json()["error"]["code"] == "not_confirmable"
    assert await snapshot(hub) == before


async def test_an_unknown_entry_cannot_be_retired(client: Any, acme: Any, hub: Any) -> None:
    before = await snapshot(hub)
    r = await client.post(f"{P}/entries/kn_nope/retire", headers=bearer(acme.owner))
    assert r.status_code == 404 and r.json()["error"]["code"] == "entry_not_found"
    assert await snapshot(hub) == before


# -- an expiry -------------------------------------------------------------------------------


async def test_an_expiry_retires_the_entry_when_it_passes_and_can_be_cleared(client: Any, acme: Any, hub: Any) -> None:
    entry_id = await _trusted(client, acme, "Staging runs Postgres 15 until the upgrade.", kind="fact")
    r = await client.post(f"{P}/entries/{entry_id}/expiry", json={"ttl_days": 2}, headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["state"] == "trusted" and r.json()["expires_at"]
    row = (await _audit(hub, entry_id))[-1]
    assert row["action"] == "retire" and row["detail"]["via"] == "expiry" and row["detail"]["previous_expires_at"] is None

    cleared = await client.post(f"{P}/entries/{entry_id}/expiry", json={"expires_at": None}, headers=bearer(acme.owner))
    assert cleared.status_code == 200 and cleared.json()["expires_at"] is None
    hub.clock.advance(3 * DAY)
    assert (await _get(client, acme, entry_id))["state"] == "trusted"

    again = await client.post(f"{P}/entries/{entry_id}/expiry", json={"ttl_days": 1}, headers=bearer(acme.owner))
    assert again.status_code == 200
    hub.clock.advance(DAY + 1)
    assert (await _get(client, acme, entry_id))["state"] == "retired"
    assert entry_id not in await _recalled(client, acme, "staging postgres upgrade")
    late = await client.post(f"{P}/entries/{entry_id}/expiry", json={"expires_at": None}, headers=bearer(acme.owner))
    assert late.status_code == 409 and late.json()["error"]["code"] == "entry_retired"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ttl_days": 0},
        {"ttl_days": True},
        {"ttl_days": "3"},
        {"expires_at": "2001-01-01T00:00:00Z"},
        {"expires_at": "tomorrow"},
        {"ttl_days": 1, "expires_at": "2999-01-01T00:00:00Z"},
        {"ttl_days": 1, "expires_at": None},
        {"ttl_days": 1, "state": "trusted"},
    ],
)
async def test_a_bad_expiry_is_refused_and_changes_nothing(client: Any, acme: Any, hub: Any, body: dict[str, Any]) -> None:
    entry_id = (await learn(client, "acme", acme.writer, "The cache key includes the locale."))["id"]
    before = await snapshot(hub)
    r = await client.post(f"{P}/entries/{entry_id}/expiry", json=body, headers=bearer(acme.owner))
    assert r.status_code == 422, r.text
    assert set(r.json()["error"]) >= {"code", "message"}
    assert await snapshot(hub) == before
    assert (await _get(client, acme, entry_id))["expires_at"] is None


# -- a correction ----------------------------------------------------------------------------


async def test_a_correction_is_a_candidate_until_confirmed_then_the_old_entry_retires(client: Any, acme: Any, hub: Any) -> None:
    old = await _trusted(client, acme, "The pooler cannot do prepared statements.")
    r = await client.post(
        f"{P}/entries/{old}/correct",
        json={"statement": "The pooler can do prepared statements since PgBouncer 1.21.", "reason": "upgraded"},
        headers=bearer(acme.owner),
    )
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["state"] == "candidate" and new["kind"] == "pitfall" and new["created_by"] == "olivia"
    assert new["provenance"] == {"replaces": old, "reason": "upgraded"}
    # Nothing trusted changed: the old entry is still what recall answers.
    assert (await _get(client, acme, old))["state"] == "trusted"
    assert await _recalled(client, acme, "pooler prepared statements") == [old]
    learn_row = (await _audit(hub, new["id"]))[-1]
    assert learn_row["action"] == "learn" and learn_row["detail"]["replaces"] == old

    confirmed = await client.post(f"{P}/entries/{new['id']}/confirm", headers=bearer(acme.owner))
    assert confirmed.status_code == 200
    assert (await _get(client, acme, old))["state"] == "retired"
    assert await _recalled(client, acme, "pooler prepared statements") == [new["id"]]
    retire_row = (await _audit(hub, old))[-1]
    assert retire_row["action"] == "retire" and retire_row["detail"] == {"from": "trusted", "replaced_by": new["id"]}


async def test_a_correction_promoted_by_issuers_retires_the_chain_it_replaces(client: Any, acme: Any, hub: Any) -> None:
    first = await _trusted(client, acme, "Deploys happen on Tuesdays.", kind="convention")

    async def correct(entry_id: str, statement: str) -> str:
        r = await client.post(f"{P}/entries/{entry_id}/correct", json={"statement": statement}, headers=bearer(acme.owner))
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    second = await correct(first, "Deploys happen on Wednesdays.")
    third = await correct(second, "Deploys happen on Thursdays after the freeze.")
    await support(hub, "acme", third, "oidc:ci.example.com:acme")
    assert (await _get(client, acme, first))["state"] == "trusted"
    await support(hub, "acme", third, "webhook:canary:acme")
    assert (await _get(client, acme, third))["state"] == "trusted"
    assert (await _get(client, acme, second))["state"] == "retired"
    assert (await _get(client, acme, first))["state"] == "retired"
    assert (await _audit(hub, first))[-1]["actor"] == "issuers"


async def test_a_correction_that_says_the_same_or_repeats_a_live_entry_is_refused(client: Any, acme: Any, hub: Any) -> None:
    old = await _trusted(client, acme, "The pooler cannot do prepared statements.")
    other = await _trusted(client, acme, "Use the direct port for prepared statements.")
    before = await snapshot(hub)
    same = await client.post(f"{P}/entries/{old}/correct", json={"statement": "the POOLER cannot do  prepared statements."},
                             headers=bearer(acme.owner))
    assert same.status_code == 422 and same.json()["error"]["code"] == "unchanged_statement"
    dup = await client.post(f"{P}/entries/{old}/correct", json={"statement": "Use the direct port for prepared statements."},
                            headers=bearer(acme.owner))
    assert dup.status_code == 409 and dup.json()["error"]["code"] == "statement_exists"
    assert dup.json()["error"]["entry_id"] == other
    smuggled = await client.post(f"{P}/entries/{old}/correct", json={"statement": "New text here.", "state": "trusted"},
                                 headers=bearer(acme.owner))
    assert smuggled.status_code == 422 and smuggled.json()["error"]["code"] == "unknown_field"
    bad_kind = await client.post(f"{P}/entries/{old}/correct", json={"statement": "New text here.", "kind": "rumour"},
                                 headers=bearer(acme.owner))
    assert bad_kind.status_code == 422 and bad_kind.json()["error"]["code"] == "invalid_kind"
    assert await snapshot(hub) == before


# -- several at once -------------------------------------------------------------------------


async def test_bulk_confirm_moves_each_entry_it_may_and_names_each_refusal(client: Any, acme: Any, hub: Any) -> None:
    a = (await learn(client, "acme", acme.writer, "Tests live beside the files they test."))["id"]
    b = (await learn(client, "acme", acme.writer, "Feature flags are removed within a month."))["id"]
    blocked = (await learn(client, "acme", acme.writer, "The API returns dates in UTC."))["id"]
    r = await client.post(f"{P}/events", json={"type": "error", "detail": {"contradicts": blocked}}, headers=bearer(acme.writer))
    assert r.json()["effect"] == "contradicted"

    r = await client.post(f"{P}/entries/bulk", json={"action": "confirm", "entry_ids": [a, blocked, "kn_nope", b, a]},
                          headers=bearer(acme.owner))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["moved"] == 2 and body["refused"] == 2
    by_id = {item["entry_id"]: item for item in body["results"]}
    assert [item["entry_id"] for item in body["results"]] == [a, blocked, "kn_nope", b]  # once each, in order
    assert by_id[a]["ok"] and by_id[a]["entry"]["state"] == "trusted"
    assert by_id[blocked]["error"]["code"] == "blocked_by_contradiction" and "blocked_until" in by_id[blocked]["error"]
    assert by_id["kn_nope"]["error"]["code"] == "entry_not_found"
    override = (await _audit(hub, b))[-1]
    assert override["action"] == "override" and override["detail"] == {"from": "candidate", "bulk": True}


async def test_bulk_refute_and_retire(client: Any, acme: Any, hub: Any) -> None:
    ids = [await _trusted(client, acme, f"Service {n} listens on port {8000 + n}.", kind="fact") for n in range(3)]
    no_reason = await client.post(f"{P}/entries/bulk", json={"action": "refute", "entry_ids": ids}, headers=bearer(acme.owner))
    assert no_reason.status_code == 422
    r = await client.post(f"{P}/entries/bulk", json={"action": "refute", "entry_ids": ids[:2], "reason": "ports moved"},
                          headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["moved"] == 2
    assert [(await _get(client, acme, i))["state"] for i in ids] == ["contradicted", "contradicted", "trusted"]
    r = await client.post(f"{P}/entries/bulk", json={"action": "retire", "entry_ids": ids}, headers=bearer(acme.owner))
    assert r.json()["moved"] == 3
    assert [(await _get(client, acme, i))["state"] for i in ids] == ["retired"] * 3
    assert await audit_actions(hub, "acme", ids[0]) == ["learn", "override", "contradict", "retire"]


@pytest.mark.parametrize(
    "body",
    [
        {"action": "promote", "entry_ids": ["kn_x"]},
        {"action": "confirm", "entry_ids": []},
        {"action": "confirm", "entry_ids": "kn_x"},
        {"action": "confirm", "entry_ids": [1, 2]},
        {"action": "confirm", "entry_ids": ["kn_x"] * 101},
        {"action": "confirm"},
        {"action": "confirm", "entry_ids": ["kn_x"], "trusted": True},
        {"action": "retire", "entry_ids": ["kn_x"], "reason": ""},
    ],
)
async def test_a_bad_bulk_request_is_refused_whole(client: Any, acme: Any, hub: Any, body: dict[str, Any]) -> None:
    await learn(client, "acme", acme.writer, "Something to keep the table non-empty.")
    before = await snapshot(hub)
    r = await client.post(f"{P}/entries/bulk", json=body, headers=bearer(acme.owner))
    assert r.status_code == 422, r.text
    assert await snapshot(hub) == before


# -- as an attacker --------------------------------------------------------------------------

MOVES = [
    ("retire", {"reason": "mine now"}),
    ("expiry", {"ttl_days": 1}),
    ("expiry", {"expires_at": None}),
    ("correct", {"statement": "The pooler is fine, use it for everything."}),
]


@pytest.mark.parametrize("who", ["writer", "reader"])
async def test_no_owner_move_works_with_a_writer_or_reader_token(client: Any, acme: Any, hub: Any, who: str) -> None:
    token = getattr(acme, who)
    trusted = await _trusted(client, acme, "The pooler cannot do prepared statements.")
    # The writer's own candidate: a principal sees its own entries, and still cannot move them.
    own = (await learn(client, "acme", acme.writer, "Agent-7 thinks the cache is per user."))["id"]
    before = await snapshot(hub)
    for entry_id in (trusted, own, "kn_unknown"):
        for move, body in MOVES:
            r = await client.post(f"{P}/entries/{entry_id}/{move}", json=body, headers=bearer(token))
            assert r.status_code == 403, (move, r.text)
            assert r.json()["error"]["code"] == "insufficient_level"
        for action in ("confirm", "refute", "retire"):
            r = await client.post(f"{P}/entries/bulk", json={"action": action, "entry_ids": [entry_id], "reason": "x"},
                                  headers=bearer(token))
            assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_level"
    # A body the level check cannot be skipped with: a bad one is still 403, never 422 first.
    r = await client.post(f"{P}/entries/bulk", json={"action": "confirm", "entry_ids": [own], "force": True}, headers=bearer(token))
    assert r.status_code == 403
    assert await snapshot(hub) == before
    assert (await _get(client, acme, trusted))["state"] == "trusted"
    assert (await _get(client, acme, own))["expires_at"] is None


async def test_another_projects_owner_and_no_token_get_nothing(client: Any, acme: Any, hub: Any) -> None:
    other = await make_project(hub, "rival")
    trusted = await _trusted(client, acme, "The pooler cannot do prepared statements.")
    before = await snapshot(hub)
    for move, body in MOVES:
        r = await client.post(f"{P}/entries/{trusted}/{move}", json=body, headers=bearer(other.owner))
        assert r.status_code == 404 and r.json()["error"]["code"] == "project_not_found"
        # the rival's own path does not reach acme's entry either
        r = await client.post(f"/v1/projects/rival/entries/{trusted}/{move}", json=body, headers=bearer(other.owner))
        assert r.status_code == 404 and r.json()["error"]["code"] == "entry_not_found"
        r = await client.post(f"{P}/entries/{trusted}/{move}", json=body)
        assert r.status_code == 401
    r = await client.post("/v1/projects/rival/entries/bulk", json={"action": "retire", "entry_ids": [trusted]},
                          headers=bearer(other.owner))
    assert r.status_code == 200 and r.json()["results"][0]["error"]["code"] == "entry_not_found"
    assert await snapshot(hub) == before


async def test_an_agent_cannot_make_a_correction_link_by_any_field(client: Any, acme: Any, hub: Any) -> None:
    trusted = await _trusted(client, acme, "The pooler cannot do prepared statements.")
    before = await snapshot(hub)
    r = await client.post(f"{P}/entries", json={"kind": "fact", "statement": "Anything.", "replaces": trusted},
                          headers=bearer(acme.writer))
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_field"
    r = await client.post(f"{P}/entries", json={"kind": "fact", "statement": "Anything.", "provenance": {"replaces": trusted}},
                          headers=bearer(acme.writer))
    assert r.status_code == 422
    assert await snapshot(hub) == before


async def test_the_openapi_document_describes_every_owner_move(client: Any) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in ("entries/{entry_id}/retire", "entries/{entry_id}/expiry", "entries/{entry_id}/correct", "entries/bulk"):
        op = paths[f"/v1/projects/{{project}}/{path}"]["post"]
        assert op["description"] == "Needs an owner token (or higher) of the project."
        assert "requestBody" in op and {"403", "404", "409", "422"} <= set(op["responses"])
