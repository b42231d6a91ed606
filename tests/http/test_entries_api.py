"""The knowledge core through the REST API: learn, confirm, refute, events,
recall, expiry, supports and the audit ledger."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.core.clock import DAY, HOUR
from tests.conftest import ProjectTokens
from tests.support.helpers import audit_actions, bearer, learn, support


async def test_learn_writes_a_candidate(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "The pooler cannot do prepared statements.", kind="pitfall", evidence="pgbouncer log")
    assert entry["state"] == "candidate"
    assert entry["created_by"] == "agent-7"
    assert entry["created_via"] == "learn"
    assert entry["kind"] == "pitfall"
    assert entry["promoted_at"] is None and entry["promoted_by"] is None
    assert entry["distinct_issuers"] == 0 and entry["supports"] == [] and entry["contradictions"] == []
    assert entry["id"].startswith("kn_")
    assert entry["created_at"].endswith("Z")


async def test_learn_duplicate_of_own_entry(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    first = await learn(client, "acme", acme.writer, "Staging runs migrations on boot.")
    r = await client.post(
        "/v1/projects/acme/entries",
        json={"kind": "fact", "statement": "  staging RUNS migrations   on boot. "},
        headers=bearer(acme.writer),
    )
    assert r.status_code == 200
    assert r.json()["duplicate"] is True and r.json()["id"] == first["id"]


async def test_learn_never_reveals_another_principals_candidate(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    mine = await learn(client, "acme", acme.writer, "Secret candidate statement.")
    r = await client.post(
        "/v1/projects/acme/entries", json={"kind": "fact", "statement": "secret candidate statement."}, headers=bearer(acme.other_writer)
    )
    assert r.status_code == 201
    assert r.json()["id"] != mine["id"] and "duplicate" not in r.json()


async def test_learn_duplicate_of_trusted_entry(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Tests live beside the file.", kind="convention")
    assert (await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))).status_code == 200
    r = await client.post(
        "/v1/projects/acme/entries", json={"kind": "convention", "statement": "tests live beside the file."}, headers=bearer(acme.other_writer)
    )
    assert r.status_code == 200 and r.json()["duplicate"] is True and r.json()["state"] == "trusted"


async def test_owner_confirm_promotes_alone_and_is_audited_as_override(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Migrations are named YYYYMMDD_description.sql.", kind="convention")
    r = await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "trusted" and body["promoted_by"] == "owner:olivia" and body["promoted_at"]
    assert await audit_actions(hub, "acme", entry["id"]) == ["learn", "override"]
    again = await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_confirmable"


async def test_candidate_invisible_to_others_until_trusted(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Deploys freeze on Fridays.", kind="decision")
    for token in (acme.other_writer, acme.reader):
        assert (await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(token))).status_code == 404
        listing = await client.get("/v1/projects/acme/entries", headers=bearer(token))
        assert entry["id"] not in [e["id"] for e in listing.json()["entries"]]
        recall = await client.get("/v1/projects/acme/recall", params={"q": "deploys friday freeze"}, headers=bearer(token))
        assert recall.json()["entries"] == []
    assert (await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.writer))).status_code == 200
    assert (await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.owner))).status_code == 200
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    recall = await client.get("/v1/projects/acme/recall", params={"q": "when do deploys freeze?"}, headers=bearer(acme.reader))
    assert [e["id"] for e in recall.json()["entries"]] == [entry["id"]]
    assert recall.json()["entries"][0]["score"] > 0


async def test_refute_demotes_at_once_and_blocks_confirm_until_window_ends(
    client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, clock: Any
) -> None:
    entry = await learn(client, "acme", acme.writer, "The cache is warmed on deploy.")
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    r = await client.post(f"/v1/projects/acme/entries/{entry['id']}/refute", json={"reason": "it is not"}, headers=bearer(acme.owner))
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "contradicted" and body["promoted_at"] is not None  # history kept
    assert body["contradictions"][0]["by"] == "olivia"
    recall = await client.get("/v1/projects/acme/recall", params={"q": "cache warmed deploy"}, headers=bearer(acme.reader))
    assert recall.json()["entries"] == []
    blocked = await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    assert blocked.status_code == 409
    error = blocked.json()["error"]
    assert error["code"] == "blocked_by_contradiction" and error["blocked_until"].endswith("Z")
    assert error["blocked_until"][:10] in error["message"]
    clock.advance(30 * DAY + 1)
    ok = await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    assert ok.status_code == 200 and ok.json()["state"] == "trusted"
    assert await audit_actions(hub, "acme", entry["id"]) == ["learn", "override", "contradict", "override"]


async def test_window_change_does_not_lift_a_live_contradiction(client: httpx.AsyncClient, acme: ProjectTokens, clock: Any) -> None:
    entry = await learn(client, "acme", acme.writer, "A refuted fact.")
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/refute", json={"reason": "wrong"}, headers=bearer(acme.owner))
    r = await client.patch("/v1/projects/acme/settings", json={"window_days": 1}, headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["window_days"] == 1
    clock.advance(2 * DAY)
    blocked = await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    assert blocked.status_code == 409 and blocked.json()["error"]["code"] == "blocked_by_contradiction"


async def test_agent_error_event_contradicts(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Port 5432 is the pooler.")
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    r = await client.post(
        "/v1/projects/acme/events",
        json={"type": "error", "detail": {"contradicts": entry["id"], "log": "connection refused"}},
        headers=bearer(acme.other_writer),
    )
    assert r.status_code == 202
    assert r.json()["effect"] == "contradicted" and r.json()["event_id"]
    again = await client.post(
        "/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry["id"]}}, headers=bearer(acme.other_writer)
    )
    assert again.json()["effect"] == "duplicate"
    state = await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.owner))
    assert state.json()["state"] == "contradicted" and len(state.json()["contradictions"]) == 1
    assert await audit_actions(hub, "acme", entry["id"]) == ["learn", "override", "contradict"]


async def test_event_cannot_name_another_principals_candidate(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Someone else's candidate.")
    r = await client.post(
        "/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry["id"]}}, headers=bearer(acme.other_writer)
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "entry_not_found"
    unknown = await client.post(
        "/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": "kn_nope"}}, headers=bearer(acme.writer)
    )
    assert unknown.status_code == 404
    own = await client.post(
        "/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry["id"]}}, headers=bearer(acme.writer)
    )
    assert own.json()["effect"] == "contradicted"


async def test_other_events_change_nothing(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "An entry agents try to promote.")
    for payload in (
        {"type": "success", "detail": {"supports": entry["id"]}},
        {"type": "confirm", "detail": {"entry": entry["id"], "state": "trusted"}},
        {"type": "support", "detail": {"contradicts": entry["id"]}},
        {"type": "error", "detail": {"promote": entry["id"]}},
    ):
        r = await client.post("/v1/projects/acme/events", json=payload, headers=bearer(acme.writer))
        assert r.status_code == 202 and r.json()["effect"] == "none"
    got = await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.owner))
    assert got.json()["state"] == "candidate"


async def test_demotion_rate_limit(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, clock: Any) -> None:
    await client.patch("/v1/projects/acme/settings", json={"demotions_per_hour": 3}, headers=bearer(acme.owner))
    ids = []
    for i in range(6):
        e = await learn(client, "acme", acme.owner, f"Trusted fact number {i}.")
        await client.post(f"/v1/projects/acme/entries/{e['id']}/confirm", headers=bearer(acme.owner))
        ids.append(e["id"])
    for entry_id in ids[:3]:
        r = await client.post("/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry_id}}, headers=bearer(acme.writer))
        assert r.json()["effect"] == "contradicted"
    for entry_id in ids[3:5]:
        r = await client.post("/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry_id}}, headers=bearer(acme.writer))
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "rate_limited" and int(r.headers["retry-after"]) > 0
    still = await client.get(f"/v1/projects/acme/entries/{ids[3]}", headers=bearer(acme.owner))
    assert still.json()["state"] == "trusted"
    actions = await audit_actions(hub, "acme")
    assert actions.count("rate_limited") == 1  # one ledger row per principal per hour
    # another principal has its own budget
    r = await client.post("/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": ids[3]}}, headers=bearer(acme.other_writer))
    assert r.json()["effect"] == "contradicted"
    clock.advance(HOUR + 1)
    r = await client.post("/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": ids[4]}}, headers=bearer(acme.writer))
    assert r.json()["effect"] == "contradicted"


async def test_expiry_drops_from_recall_at_once_and_sweep_records_it(
    client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, clock: Any
) -> None:
    entry = await learn(client, "acme", acme.writer, "The release branch is frozen this week.", ttl_days=2)
    assert entry["expires_at"] is not None
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    q = {"q": "release branch frozen"}
    assert len((await client.get("/v1/projects/acme/recall", params=q, headers=bearer(acme.reader))).json()["entries"]) == 1
    clock.advance(2 * DAY)
    assert (await client.get("/v1/projects/acme/recall", params=q, headers=bearer(acme.reader))).json()["entries"] == []
    got = await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.owner))
    assert got.json()["state"] == "retired"
    listed = await client.get("/v1/projects/acme/entries", params={"state": "retired"}, headers=bearer(acme.owner))
    assert [e["id"] for e in listed.json()["entries"]] == [entry["id"]]
    assert await hub.knowledge.sweep() == 1
    assert await hub.knowledge.sweep() == 0
    assert (await audit_actions(hub, "acme", entry["id"]))[-1] == "retire"
    confirm = await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    assert confirm.status_code == 409 and confirm.json()["error"]["code"] == "not_confirmable"
    event = await client.post("/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry["id"]}}, headers=bearer(acme.writer))
    assert event.status_code == 409


async def test_k_distinct_issuers_promote_and_dedupe(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Schema changes need a migration test.")
    first = await support(hub, "acme", entry["id"], "oidc:token.actions.githubusercontent.com:acme", "migrations")
    assert not first.duplicate and not first.promoted
    rerun = await support(hub, "acme", entry["id"], "oidc:token.actions.githubusercontent.com:acme", "migrations")
    assert rerun.duplicate
    other_check = await support(hub, "acme", entry["id"], "oidc:token.actions.githubusercontent.com:acme", "unit-tests")
    assert not other_check.promoted  # still one issuer
    second = await support(hub, "acme", entry["id"], "oidc:gitlab.example.com:acme", "migrations")
    assert second.promoted
    got = (await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.reader))).json()
    assert got["state"] == "trusted" and got["promoted_by"] == "issuers" and got["distinct_issuers"] == 2
    assert {s["issuer"] for s in got["supports"]} == {"oidc:token.actions.githubusercontent.com:acme", "oidc:gitlab.example.com:acme"}
    assert (await audit_actions(hub, "acme", entry["id"])).count("promote") == 1
    third = await support(hub, "acme", entry["id"], "webhook:nightly:acme", "canary")
    assert not third.promoted
    assert (await audit_actions(hub, "acme", entry["id"])).count("promote") == 1


async def test_support_never_lifts_a_contradicted_entry(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Refuted before CI spoke.")
    await client.post("/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry["id"]}}, headers=bearer(acme.writer))
    for issuer in ("oidc:a:acme", "oidc:b:acme", "oidc:c:acme"):
        assert not (await support(hub, "acme", entry["id"], issuer)).promoted
    got = (await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.owner))).json()
    assert got["state"] == "contradicted" and got["distinct_issuers"] == 3


async def test_support_of_an_entry_of_another_project_is_ignored(hub: Any, client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    from tests.conftest import make_project

    other = await make_project(hub, "beta")
    entry = await learn(client, "beta", other.writer, "Beta's own fact.")
    assert await support(hub, "acme", entry["id"], "oidc:a:acme") is None


async def test_k_setting_is_per_project(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    await client.patch("/v1/projects/acme/settings", json={"k_distinct_issuers": 1}, headers=bearer(acme.owner))
    entry = await learn(client, "acme", acme.writer, "One issuer is enough here.")
    assert (await support(hub, "acme", entry["id"], "oidc:a:acme")).promoted


async def test_recall_used(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Use the retry helper for HTTP calls.", kind="convention")
    hidden = await learn(client, "acme", acme.writer, "Use the retry helper for queue calls.", kind="convention")
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    recall = (await client.get("/v1/projects/acme/recall", params={"q": "retry helper http"}, headers=bearer(acme.reader))).json()
    assert [e["id"] for e in recall["entries"]] == [entry["id"]]
    body = {"recall_id": recall["recall_id"], "entry_id": entry["id"]}
    assert (await client.post("/v1/projects/acme/recall_used", json=body, headers=bearer(acme.reader))).status_code == 204
    assert (await client.post("/v1/projects/acme/recall_used", json=body, headers=bearer(acme.reader))).status_code == 204
    # another principal cannot report on this recall; an entry it did not return is refused
    assert (await client.post("/v1/projects/acme/recall_used", json=body, headers=bearer(acme.writer))).status_code == 404
    wrong = {"recall_id": recall["recall_id"], "entry_id": hidden["id"]}
    assert (await client.post("/v1/projects/acme/recall_used", json=wrong, headers=bearer(acme.reader))).status_code == 404


async def test_listing_paginates(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    ids = [(await learn(client, "acme", acme.writer, f"Paged fact {i}."))["id"] for i in range(7)]
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/projects/acme/entries", params=params, headers=bearer(acme.writer))).json()
        seen += [e["id"] for e in page["entries"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    kind = await client.get("/v1/projects/acme/entries", params={"kind": "pitfall"}, headers=bearer(acme.writer))
    assert kind.json()["entries"] == []


async def test_settings_validation(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    got = (await client.get("/v1/projects/acme/settings", headers=bearer(acme.owner))).json()
    assert got == {"k_distinct_issuers": 2, "window_days": 30.0, "playbook_min_trusted": 5, "playbook_top_n": 20, "demotions_per_hour": 10}
    for bad in (
        {"k_distinct_issuers": 0}, {"k_distinct_issuers": 1.5}, {"k_distinct_issuers": "2"}, {"k_distinct_issuers": True},
        {"window_days": 0}, {"window_days": -1}, {"playbook_top_n": 0}, {"playbook_top_n": 101},
        {"playbook_min_trusted": -1}, {"demotions_per_hour": 0}, {"window_days": None},
    ):
        r = await client.patch("/v1/projects/acme/settings", json=bad, headers=bearer(acme.owner))
        assert r.status_code == 422, bad
    unknown = await client.patch("/v1/projects/acme/settings", json={"auto_trust": True}, headers=bearer(acme.owner))
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_field"
    assert (await client.get("/v1/projects/acme/settings", headers=bearer(acme.owner))).json() == got
    ok = await client.patch("/v1/projects/acme/settings", json={"window_days": 0.5, "playbook_top_n": 100}, headers=bearer(acme.owner))
    assert ok.status_code == 200 and ok.json()["window_days"] == 0.5


async def test_playbook_get_and_put(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    r = await client.get("/v1/projects/acme/playbook", headers=bearer(acme.reader))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    put = await client.put("/v1/projects/acme/playbook", content="# Acme\n\nBe kind.\n", headers=bearer(acme.owner))
    assert put.status_code == 200
    assert (await client.get("/v1/projects/acme/playbook", headers=bearer(acme.reader))).text == "# Acme\n\nBe kind.\n"
    assert (await client.put("/v1/projects/acme/playbook", content="x", headers=bearer(acme.writer))).status_code == 403


async def test_learn_and_event_budgets(hub: Any, client: httpx.AsyncClient, acme: ProjectTokens, clock: Any) -> None:
    from gateway.knowledge.service import WriteLimits

    hub.knowledge.limits = WriteLimits(learn_per_hour=3, events_per_hour=2)
    for i in range(3):
        await learn(client, "acme", acme.writer, f"Budgeted fact {i}.")
    r = await client.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": "One too many."}, headers=bearer(acme.writer))
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
    # a duplicate costs nothing and still answers
    dup = await client.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": "budgeted fact 0."}, headers=bearer(acme.writer))
    assert dup.status_code == 200
    # other principals have their own budget
    await learn(client, "acme", acme.other_writer, "Someone else's fact.")
    for _ in range(2):
        assert (await client.post("/v1/projects/acme/events", json={"type": "note", "detail": {}}, headers=bearer(acme.writer))).status_code == 202
    assert (await client.post("/v1/projects/acme/events", json={"type": "note", "detail": {}}, headers=bearer(acme.writer))).status_code == 429
    clock.advance(HOUR + 1)
    assert (await client.post("/v1/projects/acme/events", json={"type": "note", "detail": {}}, headers=bearer(acme.writer))).status_code == 202
    await learn(client, "acme", acme.writer, "After the hour.")
