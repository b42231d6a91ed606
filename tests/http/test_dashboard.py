"""The dashboard in-process: sign-in, CSRF, escaping, headers, owner actions."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.core.clock import DAY, HOUR, to_date
from tests.support.dashboard_helpers import HTML, csrf_for, csrf_from, login, post_form
from tests.support.helpers import audit_actions, bearer, learn, snapshot

PAYLOAD = "<script>alert('owned')</script><img src=x onerror=alert(1)>"

# Sign-in, CSRF, headers and escaping are the same whatever the store: these
# run on SQLite only; the tests that read or move entries run on both backends.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


async def _entry(client: Any, acme: Any, statement: str = "The pooler cannot do prepared statements.", **extra: Any) -> str:
    return (await learn(client, "acme", acme.writer, statement, kind="pitfall", **extra))["id"]


async def _state(client: Any, acme: Any, entry_id: str) -> str:
    return (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=bearer(acme.owner))).json()["state"]


# -- signing in ------------------------------------------------------------------------------


@sqlite_only
async def test_owner_signs_in_with_a_strict_http_only_cookie(client: Any, acme: Any) -> None:
    r = await login(client, acme.owner)
    assert r.status_code == 303 and r.headers["location"] == "/projects/acme/knowledge"
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("rr_session="))
    flags = [part.strip().lower() for part in cookie.split(";")]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/" in flags
    assert "secure" not in flags  # plain http (tests); https below
    page = await client.get("/projects/acme/knowledge", headers=HTML)
    assert page.status_code == 200 and "olivia" in page.text


@sqlite_only
async def test_the_cookie_is_secure_over_https(app: Any, acme: Any) -> None:
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://dash.example") as c:
        r = await login(c, acme.owner)
        cookie = next(x for x in r.headers.get_list("set-cookie") if x.startswith("rr_session="))
        assert "secure" in [part.strip().lower() for part in cookie.split(";")]


@pytest.mark.parametrize("who", ["reader", "writer"])
@sqlite_only
async def test_read_and_write_tokens_cannot_sign_in(client: Any, acme: Any, who: str) -> None:
    r = await login(client, getattr(acme, who))
    assert r.status_code == 403
    assert "cannot sign in" in r.text
    assert not any(c.startswith("rr_session=") for c in r.headers.get_list("set-cookie"))
    follow = await client.get("/projects/acme/knowledge", headers=HTML)
    assert follow.status_code == 303 and follow.headers["location"].startswith("/login")


@sqlite_only
async def test_unknown_and_revoked_tokens_cannot_sign_in(client: Any, acme: Any, hub: Any) -> None:
    assert (await login(client, "rr_not-a-real-token")).status_code == 401
    await hub.accounts.revoke_tokens("acme", "olivia")
    assert (await login(client, acme.owner)).status_code == 401


@sqlite_only
async def test_the_login_form_is_csrf_protected(client: Any, acme: Any, app: Any) -> None:
    import httpx

    r = await client.post("/login", data={"token": acme.owner}, headers=HTML)
    assert r.status_code == 403
    # a token minted for another browser (another login cookie) does not work here
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750") as other:
        foreign = csrf_from((await other.get("/login", headers=HTML)).text)
    await client.get("/login", headers=HTML)
    r = await client.post("/login", data={"token": acme.owner, "csrf_token": foreign}, headers=HTML)
    assert r.status_code == 403
    assert not any(c.startswith("rr_session=") for c in r.headers.get_list("set-cookie"))


@sqlite_only
async def test_login_returns_to_a_page_of_the_project_only(client: Any, acme: Any) -> None:
    form = await client.get("/login?next=/projects/acme/audit", headers=HTML)
    r = await client.post(
        "/login", data={"token": acme.owner, "csrf_token": csrf_from(form.text), "next": "/projects/acme/audit"}, headers=HTML
    )
    assert r.headers["location"] == "/projects/acme/audit"
    for evil in ("https://evil.example/", "//evil.example/projects/acme/", "/projects/other/knowledge"):
        form = await client.get("/login", headers=HTML)
        r = await client.post("/login", data={"token": acme.owner, "csrf_token": csrf_from(form.text), "next": evil}, headers=HTML)
        assert r.headers["location"] == "/projects/acme/knowledge"


@sqlite_only
async def test_pages_need_a_session(client: Any, acme: Any) -> None:
    r = await client.get("/projects/acme/knowledge", headers=HTML)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Fprojects%2Facme%2Fknowledge"
    r = await client.get("/projects/acme/learning")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_session"
    # a bearer token is not a dashboard session
    r = await client.get("/projects/acme/knowledge", headers={**HTML, **bearer(acme.owner)})
    assert r.status_code == 303


async def test_revoking_the_owner_token_ends_the_session(client: Any, acme: Any, hub: Any) -> None:
    await login(client, acme.owner)
    csrf = await csrf_for(client)
    entry_id = await _entry(client, acme)
    await hub.accounts.revoke_tokens("acme", "olivia")
    r = await client.get("/projects/acme/knowledge", headers=HTML)
    assert r.status_code == 303
    r = await client.post(f"/projects/acme/entries/{entry_id}/confirm", data={"csrf_token": csrf}, headers=HTML)
    assert r.status_code == 403
    reader = await hub.accounts.authenticate(acme.writer)  # the owner's token is gone: read as the author
    assert (await hub.knowledge.get(reader, entry_id)).state == "candidate"


@sqlite_only
async def test_sessions_expire_and_tampering_fails(client: Any, acme: Any, hub: Any) -> None:
    await login(client, acme.owner)
    value = client.cookies.get("rr_session")
    body, mac = value.split(".")
    client.cookies.set("rr_session", body + "." + mac[:-2] + ("AA" if not mac.endswith("AA") else "BB"))
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 303
    client.cookies.set("rr_session", value)
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 200
    hub.clock.advance(13 * HOUR)
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 303


@sqlite_only
async def test_a_session_is_worth_nothing_in_another_project(client: Any, acme: Any, hub: Any) -> None:
    from tests.conftest import make_project

    await make_project(hub, "other")
    await login(client, acme.owner)
    r = await client.get("/projects/other/knowledge", headers=HTML)
    assert r.status_code == 404
    assert (await client.get("/projects/other/RELAYROOM.md")).status_code == 404


@sqlite_only
async def test_logout(client: Any, acme: Any) -> None:
    await login(client, acme.owner)
    csrf = await csrf_for(client)
    r = await client.post("/logout", data={}, headers=HTML)
    assert r.status_code == 403  # signed in, no token: refused like any other form
    r = await client.post("/logout", data={"csrf_token": csrf}, headers=HTML)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 303


# -- CSRF on every state-changing form -------------------------------------------------------


def _forms(entry_id: str, proposal_id: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (f"/projects/acme/entries/{entry_id}/confirm", {}),
        (f"/projects/acme/entries/{entry_id}/refute", {"reason": "wrong"}),
        (f"/projects/acme/proposals/{proposal_id}/approve", {}),
        (f"/projects/acme/proposals/{proposal_id}/reject", {"reason": "no"}),
        ("/projects/acme/playbook", {"playbook": "# hijacked"}),
        ("/projects/acme/settings", {"k_distinct_issuers": "1"}),
    ]


async def test_every_form_post_without_its_csrf_token_is_refused(client: Any, acme: Any, hub: Any, app: Any) -> None:
    import httpx

    entry_id = await _entry(client, acme)
    proposal = await client.post(
        "/v1/projects/acme/proposals", json={"kind": "fact", "statement": "Worth keeping here", "rationale": "r"}, headers=bearer(acme.writer)
    )
    proposal_id = proposal.json()["id"]
    await login(client, acme.owner)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750") as other:
        await login(other, acme.owner)
        other_csrf = await csrf_for(other)  # a valid token of another session
    before = await snapshot(hub)
    for path, data in _forms(entry_id, proposal_id):
        for csrf in (None, "", "forged", other_csrf):
            fields = dict(data)
            if csrf is not None:
                fields["csrf_token"] = csrf
            r = await client.post(path, data=fields, headers=HTML)
            assert r.status_code == 403, (path, csrf, r.status_code)
        r = await client.post(path, json={"csrf_token": "x", **data})  # not a form: no token either
        assert r.status_code == 403 and r.json()["error"]["code"] == "csrf_failed"
        r = await client.post(path)
        assert r.status_code == 403
    assert await snapshot(hub) == before
    assert (await client.get("/v1/projects/acme/playbook", headers=bearer(acme.reader))).text.startswith("# RELAYROOM.md")


@sqlite_only
async def test_every_state_changing_form_on_every_page_carries_a_csrf_field(client: Any, acme: Any) -> None:
    entry_id = await _entry(client, acme)
    await client.post(
        "/v1/projects/acme/proposals", json={"kind": "fact", "statement": "Worth keeping here", "rationale": "r"}, headers=bearer(acme.writer)
    )
    await login(client, acme.owner)
    pages = ["knowledge", "proposals", "checks", "learning", "audit", "playbook", "settings", f"entries/{entry_id}"]
    posts = 0
    for name in pages:
        text = (await client.get(f"/projects/acme/{name}", headers=HTML)).text
        for form in re.findall(r"<form\b.*?</form>", text, re.S):
            if 'method="post"' in form:
                posts += 1
                assert re.search(r'<input type="hidden" name="csrf_token" value="[^"]+">', form), form
    assert posts >= 10


# -- escaping and headers ----------------------------------------------------------------------


@sqlite_only
async def test_agent_written_html_is_escaped_everywhere(client: Any, acme: Any, hub: Any) -> None:
    entry_id = await _entry(client, acme, PAYLOAD, evidence=PAYLOAD)
    trusted = await _entry(client, acme, "A trusted entry to contradict")
    await client.post(f"/v1/projects/acme/entries/{trusted}/confirm", headers=bearer(acme.owner))
    await client.post(
        "/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": trusted, "reason": PAYLOAD}},
        headers=bearer(acme.other_writer),
    )
    await client.post(
        "/v1/projects/acme/proposals", json={"kind": "fact", "statement": PAYLOAD + " proposal", "rationale": PAYLOAD},
        headers=bearer(acme.writer),
    )
    await client.post(
        "/v1/projects/acme/threads/t/messages", json={"author": PAYLOAD, "text": f"Pitfall: {PAYLOAD} extracted"},
        headers=bearer(acme.writer),
    )
    await login(client, acme.owner)
    for name in ("knowledge", f"entries/{entry_id}", f"entries/{trusted}", "proposals", "audit", "learning"):
        text = (await client.get(f"/projects/acme/{name}", headers=HTML)).text
        assert "<script>alert" not in text and "<img src=x" not in text, name
        assert "onerror=alert" not in text.replace("onerror=alert(1)&gt;", ""), name
    knowledge = (await client.get("/projects/acme/knowledge", headers=HTML)).text
    assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in knowledge


@sqlite_only
async def test_pages_carry_a_strict_content_security_policy(client: Any, acme: Any) -> None:
    await _entry(client, acme)
    for path in ("/login",):
        r = await client.get(path, headers=HTML)
        _assert_strict(r)
    await login(client, acme.owner)
    for name in ("knowledge", "proposals", "checks", "learning", "audit", "playbook", "settings"):
        r = await client.get(f"/projects/acme/{name}", headers=HTML)
        assert r.status_code == 200
        _assert_strict(r)
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", r.text), "inline script"
        assert not re.search(r"\son[a-z]+\s*=", r.text), "inline event handler"
        assert not re.search(r"\sstyle\s*=", r.text), "inline style"
    r = await client.get("/projects/acme/nope-such-entry", headers=HTML)
    assert r.status_code in (404, 405)


def _assert_strict(r: Any) -> None:
    csp = r.headers["content-security-policy"]
    directives = {d.strip().split(" ", 1)[0]: d.strip() for d in csp.split(";")}
    assert directives["script-src"] == "script-src 'self'"
    assert directives["frame-ancestors"] == "frame-ancestors 'none'"
    assert directives["default-src"] == "default-src 'none'"
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"


@sqlite_only
async def test_static_files_are_served(client: Any) -> None:
    css = await client.get("/static/dashboard.css")
    js = await client.get("/static/dashboard.js")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]


# -- the Knowledge tab ---------------------------------------------------------------------------


@sqlite_only
async def test_each_entry_has_its_id_and_owner_buttons_inside_forms(client: Any, acme: Any) -> None:
    entry_id = await _entry(client, acme)
    await login(client, acme.owner)
    text = (await client.get("/projects/acme/knowledge", headers=HTML)).text
    block = re.search(rf'<li class="entry[^"]*" data-entry-id="{entry_id}".*?</li>', text, re.S)
    assert block is not None
    forms = re.findall(r"<form\b.*?</form>", block.group(0), re.S)
    labels = [re.search(r"<button[^>]*>(.*?)</button>", f).group(1) for f in forms]
    assert labels == ["Confirm", "Refute"]
    assert "agent-7" in block.group(0) and "learn" in block.group(0) and "0 of 2" in block.group(0)


async def test_confirm_and_refute_through_the_forms(client: Any, acme: Any, hub: Any) -> None:
    entry_id = await _entry(client, acme)
    await login(client, acme.owner)
    r = await post_form(client, f"/projects/acme/entries/{entry_id}/confirm", {"back": "/projects/acme/knowledge?state=candidate"})
    assert r.status_code == 303
    assert r.headers["location"] == f"/projects/acme/knowledge?state=candidate&notice=confirmed&entry={entry_id}"
    assert await _state(client, acme, entry_id) == "trusted"
    assert (await audit_actions(hub, "acme", entry_id))[-1] == "override"
    r = await post_form(client, f"/projects/acme/entries/{entry_id}/refute", {"reason": ""})
    assert r.status_code == 303
    entry = (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=bearer(acme.owner))).json()
    assert entry["state"] == "contradicted" and entry["contradictions"][0]["by"] == "olivia"
    assert entry["contradictions"][0]["detail"]["reason"]
    page = (await client.get(r.headers["location"], headers=HTML)).text
    assert "Refuted" in page


async def test_a_blocked_confirm_names_the_contradiction_and_the_date(client: Any, acme: Any, hub: Any) -> None:
    entry_id = await _entry(client, acme)
    await client.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    r = await client.post(
        "/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": entry_id, "reason": "it can since 1.22"}},
        headers=bearer(acme.other_writer),
    )
    assert r.json()["effect"] == "contradicted"
    blocked_until = hub.clock.now() + 30 * DAY
    hub.clock.advance(2 * DAY)
    await login(client, acme.owner)
    before = await snapshot(hub)
    r = await post_form(client, f"/projects/acme/entries/{entry_id}/confirm")
    assert r.status_code == 409 and r.headers["content-type"].startswith("text/html")
    assert "agent-9" in r.text and "it can since 1.22" in r.text
    assert re.search(r"\d{4}-\d{2}-\d{2}", to_date(blocked_until))
    assert to_date(blocked_until) in r.text
    assert f'datetime="{to_date(blocked_until)}T' in r.text
    assert await snapshot(hub) == before
    # the entry page says the same before anyone presses the button
    page = (await client.get(f"/projects/acme/entries/{entry_id}", headers=HTML)).text
    assert to_date(blocked_until) in page
    hub.clock.advance(29 * DAY)
    await login(client, acme.owner)  # a session lasts 12 hours
    r = await post_form(client, f"/projects/acme/entries/{entry_id}/confirm")
    assert r.status_code == 303 and await _state(client, acme, entry_id) == "trusted"


async def test_a_pointless_confirm_explains_itself(client: Any, acme: Any) -> None:
    entry_id = await _entry(client, acme)
    await client.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    await login(client, acme.owner)
    r = await post_form(client, f"/projects/acme/entries/{entry_id}/confirm")
    assert r.status_code == 409 and "already trusted" in r.text


async def test_refute_over_the_budget_answers_429(client: Any, acme: Any, hub: Any) -> None:
    await client.patch("/v1/projects/acme/settings", json={"demotions_per_hour": 1}, headers=bearer(acme.owner))
    first, second = await _entry(client, acme, "first entry here"), await _entry(client, acme, "second entry here")
    await login(client, acme.owner)
    assert (await post_form(client, f"/projects/acme/entries/{first}/refute", {"reason": "x"})).status_code == 303
    r = await post_form(client, f"/projects/acme/entries/{second}/refute", {"reason": "x"})
    assert r.status_code == 429 and r.headers["retry-after"]


async def test_filters_search_and_keyset_pages(client: Any, acme: Any, hub: Any) -> None:
    for i in range(60):
        await learn(client, "acme", acme.writer, f"Numbered fact {i:03d} about widgets", kind="fact")
    await learn(client, "acme", acme.writer, "The gizmo convention", kind="convention")
    await login(client, acme.owner)

    def ids(text: str) -> list[str]:
        return re.findall(r'<li class="entry[^"]*" data-entry-id="([^"]+)"', text)

    first = (await client.get("/projects/acme/knowledge?kind=fact", headers=HTML)).text
    page_one = ids(first)
    assert len(page_one) == 50
    cursor = re.search(r'rel="next" href="\?([^"]+)"', first).group(1).replace("&amp;", "&")
    second = (await client.get(f"/projects/acme/knowledge?{cursor}", headers=HTML)).text
    page_two = ids(second)
    assert len(page_two) == 10 and not set(page_one) & set(page_two)
    assert 'rel="next"' not in second
    only = (await client.get("/projects/acme/knowledge?kind=convention", headers=HTML)).text
    assert len(ids(only)) == 1 and "gizmo" in only
    found = (await client.get("/projects/acme/knowledge?q=FACT+007", headers=HTML)).text
    assert len(ids(found)) == 1 and "Numbered fact 007" in found
    none = (await client.get("/projects/acme/knowledge?state=trusted", headers=HTML)).text
    assert ids(none) == []
    bad = await client.get("/projects/acme/knowledge?state=sideways", headers=HTML)
    assert bad.status_code == 422 and "state must be one of" in bad.text
    bad = await client.get("/projects/acme/knowledge?cursor=garbage!", headers=HTML)
    assert bad.status_code == 422


async def test_the_entry_page_shows_provenance_and_audit(client: Any, acme: Any) -> None:
    r = await client.post(
        "/v1/projects/acme/threads/release-7/messages", json={"author": "bob", "text": "Pitfall: caches outlive deploys by an hour"},
        headers=bearer(acme.writer),
    )
    entry_id = r.json()["candidates"][0]
    await login(client, acme.owner)
    page = await client.get(f"/projects/acme/entries/{entry_id}", headers=HTML)
    assert page.status_code == 200
    assert "release-7" in page.text and r.json()["message_id"] in page.text and "extraction" in page.text
    assert 'class="action action-learn"' in page.text
    assert (await client.get("/projects/acme/entries/kn_nope", headers=HTML)).status_code == 404


async def test_audit_filters(client: Any, acme: Any) -> None:
    a, b = await _entry(client, acme, "entry a for audit"), await _entry(client, acme, "entry b for audit")
    await client.post(f"/v1/projects/acme/entries/{a}/confirm", headers=bearer(acme.owner))
    await login(client, acme.owner)
    text = (await client.get(f"/projects/acme/audit?entry={a}", headers=HTML)).text
    actions = re.findall(r'<tr data-action="([a-z_]+)"', text)
    assert actions == ["override", "learn"]
    text = (await client.get("/projects/acme/audit?action=learn", headers=HTML)).text
    rows = re.findall(r'<tr data-action="([a-z_]+)"', text)
    assert rows == ["learn", "learn"] and b in text


# -- proposals, checks, playbook, settings -----------------------------------------------------


async def test_approve_and_reject_proposals_in_the_dashboard(client: Any, acme: Any, hub: Any) -> None:
    made = []
    for statement in ("Proposal one is worth keeping", "Proposal two is not"):
        r = await client.post(
            "/v1/projects/acme/proposals", json={"kind": "fact", "statement": statement, "rationale": "because"}, headers=bearer(acme.writer)
        )
        made.append(r.json()["id"])
    await login(client, acme.owner)
    page = (await client.get("/projects/acme/proposals", headers=HTML)).text
    assert all(f'data-proposal-id="{p}"' in page for p in made)
    r = await post_form(client, f"/projects/acme/proposals/{made[0]}/approve")
    assert r.status_code == 303 and "notice=approved" in r.headers["location"]
    entry_id = r.headers["location"].rsplit("entry=", 1)[1]
    entry = (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=bearer(acme.owner))).json()
    assert entry["state"] == "candidate" and entry["created_via"] == "reflection"
    r = await post_form(client, f"/projects/acme/proposals/{made[1]}/reject", {"reason": "too vague"})
    assert r.status_code == 303
    r = await post_form(client, f"/projects/acme/proposals/{made[1]}/approve")
    assert r.status_code == 409 and "already rejected" in r.text
    rejected = (await client.get("/projects/acme/proposals?state=rejected", headers=HTML)).text
    assert "too vague" in rejected


async def test_the_checks_page_lists_every_attested_check(client: Any, acme: Any, hub: Any) -> None:
    from gateway.core.ids import new_id

    related = await _entry(client, acme, "Staging migrations must run before the deploy")
    await _entry(client, acme, "Something unrelated about fonts")
    project = await hub.accounts.project("acme")
    issuer = "oidc:token.actions.githubusercontent.com:acme"

    async def attest(check: str, outcome: str, counted: bool, reason: str | None) -> None:
        now = hub.clock.now()
        await hub.driver.write(
            lambda q: q.insert_attestation(new_id("at"), project.id, issuer, check, outcome, counted, reason, {}, None, now)
        )

    await attest("staging-migrations", "success", False, "unmapped_check")
    await attest("staging-migrations", "failure", False, "unmapped_check")
    await attest("unit-tests", "success", True, None)
    await login(client, acme.owner)
    text = (await client.get("/projects/acme/checks", headers=HTML)).text
    staging = re.search(r'<section class="card check" data-check="staging-migrations" data-mapped="(\w+)".*?</section>', text, re.S)
    assert staging is not None
    assert issuer in staging.group(0) and related in staging.group(0) and "fonts" not in staging.group(0)
    cells = re.findall(r'<td class="num">(\d+)</td>', staging.group(0))
    assert cells == ["1", "1", "0", "0", "0"]  # success, failure, cancelled, skipped, counted
    assert 'data-check="unit-tests"' in text


async def test_checks_use_the_check_map_registry_when_there_is_one(client: Any, acme: Any, hub: Any) -> None:
    from gateway.ci.checkmaps.model import CheckMap, CheckRule
    from gateway.ci.checkmaps.registry import Snapshot
    from gateway.core.ids import new_id

    project = await hub.accounts.project("acme")
    now = hub.clock.now()
    await hub.driver.write(
        lambda q: q.insert_attestation(new_id("at"), project.id, "webhook:canary:acme", "canary", "success", False, "not_success", {}, None, now)
    )
    checks = {name: CheckRule(name, ("kn_mapped",), None, line) for line, name in enumerate(("canary", "docs"), 2)}
    snapshot = hub.checkmaps.snapshot
    hub.checkmaps.snapshot = Snapshot.build([CheckMap("acme", "acme.yaml", "", (), checks)])
    try:
        await login(client, acme.owner)
        text = (await client.get("/projects/acme/checks", headers=HTML)).text
        assert 'data-check="canary" data-mapped="yes"' in text and "kn_mapped" in text
        assert "Mapped, never attested" in text and "docs" in text
    finally:
        hub.checkmaps.snapshot = snapshot


async def test_playbook_and_settings_forms(client: Any, acme: Any, hub: Any) -> None:
    await login(client, acme.owner)
    r = await post_form(client, "/projects/acme/playbook", {"playbook": "# Team playbook\r\n\r\nBe kind.\r\n"})
    assert r.status_code == 303
    assert (await client.get("/v1/projects/acme/playbook", headers=bearer(acme.reader))).text == "# Team playbook\n\nBe kind.\n"
    page = (await client.get("/projects/acme/playbook", headers=HTML)).text
    assert "Be kind." in page
    r = await post_form(client, "/projects/acme/settings", {"k_distinct_issuers": "3", "window_days": "30", "playbook_top_n": "20"})
    assert r.status_code == 303 and "settings_saved" in r.headers["location"]
    settings = (await client.get("/v1/projects/acme/settings", headers=bearer(acme.owner))).json()
    assert settings["k_distinct_issuers"] == 3
    assert (await audit_actions(hub, "acme"))[-1] == "settings"
    before = await snapshot(hub)
    for bad in ({"k_distinct_issuers": "0"}, {"window_days": "nan"}, {"playbook_top_n": "1000"}, {"k_distinct_issuers": "two"}):
        r = await post_form(client, "/projects/acme/settings", bad)
        assert r.status_code == 422, bad
    assert await snapshot(hub) == before


async def test_the_learning_panel_draws_figures(client: Any, acme: Any) -> None:
    entry_id = await _entry(client, acme, "Widgets are blue")
    await client.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    recall = (await client.get("/v1/projects/acme/recall?q=widgets", headers=bearer(acme.writer))).json()
    await client.post("/v1/projects/acme/recall_used", json={"recall_id": recall["recall_id"], "entry_id": entry_id}, headers=bearer(acme.writer))
    await login(client, acme.owner)
    text = (await client.get("/projects/acme/learning?days=7", headers=HTML)).text
    assert text.count("<svg") >= 3 and "<rect" in text and "<polyline" in text
    assert re.search(r'data-figure="recalls"><span class="tile-number">1<', text)
    assert re.search(r'data-figure="use-rate"><span class="tile-number">100%<', text)
    # No model configured here: the panel says recall is lexical.
    assert re.search(r'data-figure="ranking">Ranking in force: <strong>lexical</strong>', text)
    assert (await client.get("/projects/acme/learning?days=0", headers=HTML)).status_code == 422


async def test_a_database_of_schema_1_upgrades_to_server_side_sessions(database_url: str) -> None:
    """An existing store (before sessions were kept on the server) gains the table on open."""
    from gateway.store import open_driver
    from gateway.store.schema import LATEST_VERSION

    driver = open_driver(database_url)
    await driver.open()
    try:
        async def downgrade(q: Any) -> None:
            await q.tx.run("DROP TABLE dashboard_sessions")
            await q.tx.run("UPDATE meta SET value = '1' WHERE key = 'schema_version'")

        await driver.write(downgrade)
    finally:
        await driver.close()
    upgraded = open_driver(database_url)
    await upgraded.open()
    try:
        assert await upgraded.read(lambda q: q.meta_get("schema_version")) == str(LATEST_VERSION)
        await upgraded.write(lambda q: q.insert_session("h" * 64, "t" * 64, 100.0, 200.0))
        assert await upgraded.read(lambda q: q.count_rows("dashboard_sessions")) == 1
    finally:
        await upgraded.close()
