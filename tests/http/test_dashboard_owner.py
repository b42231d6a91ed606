"""The owner's day in the dashboard, in-process: who confirmed an entry, the
moves beyond Confirm and Refute (Retire, an expiry, a correction, one move
on picked entries), the Tokens page, readable settings and audit rows, and
the Checks page.  Each form is posted as a browser posts it (CSRF token from
the page), and each refusal is checked to change nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.accounts.tokens import digest
from gateway.core.clock import DAY, to_date
from gateway.core.ids import new_id
from tests.conftest import make_project
from tests.support.dashboard_helpers import HTML, csrf_for, login, post_form
from tests.support.helpers import bearer, learn, snapshot

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])
P = "/projects/acme"


async def _candidate(client: Any, acme: Any, statement: str, kind: str = "pitfall") -> str:
    return str((await learn(client, "acme", acme.writer, statement, kind=kind))["id"])


async def _state(client: Any, acme: Any, entry_id: str) -> dict[str, Any]:
    body: dict[str, Any] = (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=bearer(acme.owner))).json()
    return body


def _card(page: str, entry_id: str) -> str:
    match = re.search(rf'<li class="entry[^"]*" data-entry-id="{entry_id}".*?</li>', page, re.S)
    assert match is not None, entry_id
    return match.group(0)


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


# -- who vouches ------------------------------------------------------------------------------


@sqlite_only
async def test_an_owner_confirmed_entry_says_who_confirmed_it(client: Any, acme: Any) -> None:
    entry_id = await _candidate(client, acme, "The pooler cannot do prepared statements.")
    await client.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    await login(client, acme.owner)
    page = (await client.get(f"{P}/knowledge", headers=HTML)).text
    card = _text(_card(page, entry_id))
    assert "Confirmed by olivia (owner" in card
    assert "the owner's confirm is enough alone" in card
    assert "1 entry." in _text(page) and "1 entries" not in page
    entry_page = _text((await client.get(f"{P}/entries/{entry_id}", headers=HTML)).text)
    assert "Vouched by olivia (owner)" in entry_page and "confirmed by olivia (owner)" in entry_page


# -- picked entries ---------------------------------------------------------------------------


async def test_confirm_the_picked_entries_at_once(client: Any, acme: Any, hub: Any) -> None:
    a = await _candidate(client, acme, "Tests live beside the files they test.", "convention")
    b = await _candidate(client, acme, "Feature flags are removed within a month.", "convention")
    left = await _candidate(client, acme, "The API returns dates in UTC.", "fact")
    await login(client, acme.owner)
    page = (await client.get(f"{P}/knowledge", headers=HTML)).text
    assert 'form="bulk-form"' in _card(page, a) and 'id="bulk-form"' in page

    r = await post_form(client, f"{P}/entries/bulk", {"action": "confirm", f"pick:{a}": "1", f"pick:{b}": "1", "back": f"{P}/knowledge"})
    assert r.status_code == 303 and "notice=bulk_confirm" in r.headers["location"]
    assert [(await _state(client, acme, i))["state"] for i in (a, b, left)] == ["trusted", "trusted", "candidate"]
    notice = (await client.get(r.headers["location"], headers=HTML)).text
    assert "Confirmed 2 entries" in notice


async def test_a_move_on_picked_entries_lists_what_it_refused(client: Any, acme: Any, hub: Any) -> None:
    ok = await _candidate(client, acme, "Tests live beside the files they test.", "convention")
    blocked = await _candidate(client, acme, "The API returns dates in UTC.", "fact")
    await client.post("/v1/projects/acme/events", json={"type": "error", "detail": {"contradicts": blocked}}, headers=bearer(acme.writer))
    await login(client, acme.owner)
    r = await post_form(client, f"{P}/entries/bulk", {"action": "confirm", f"pick:{ok}": "1", f"pick:{blocked}": "1"})
    assert r.status_code == 200
    assert 'data-outcome="blocked_by_contradiction"' in r.text and f'data-entry-id="{ok}" data-outcome="moved"' in r.text
    assert "1 entry moved, 1 refused" in _text(r.text)
    assert (await _state(client, acme, ok))["state"] == "trusted"
    assert (await _state(client, acme, blocked))["state"] == "contradicted"


async def test_refuting_and_retiring_picked_entries(client: Any, acme: Any, hub: Any) -> None:
    ids = [await _candidate(client, acme, f"Service {n} listens on port {8000 + n}.", "fact") for n in range(3)]
    await login(client, acme.owner)
    r = await post_form(client, f"{P}/entries/bulk", {"action": "refute", "reason": "ports moved", **{f"pick:{i}": "1" for i in ids[:2]}})
    assert r.status_code == 303
    first = await _state(client, acme, ids[0])
    assert first["state"] == "contradicted" and first["contradictions"][0]["detail"]["reason"] == "ports moved"
    r = await post_form(client, f"{P}/entries/bulk", {"action": "retire", **{f"pick:{i}": "1" for i in ids}})
    assert r.status_code == 303
    assert {(await _state(client, acme, i))["state"] for i in ids} == {"retired"}


@sqlite_only
async def test_a_bad_or_forged_move_on_picked_entries_changes_nothing(client: Any, acme: Any, hub: Any) -> None:
    entry_id = await _candidate(client, acme, "Tests live beside the files they test.", "convention")
    await login(client, acme.owner)
    before = await snapshot(hub)
    for data in ({"action": "promote", f"pick:{entry_id}": "1"}, {"action": "confirm"}):
        r = await post_form(client, f"{P}/entries/bulk", data)
        assert r.status_code == 422, data
    forged = await post_form(client, f"{P}/entries/bulk", {"action": "confirm", f"pick:{entry_id}": "1"}, csrf=False)
    assert forged.status_code == 403
    assert await snapshot(hub) == before


# -- one entry's moves ------------------------------------------------------------------------


async def test_retire_an_expiry_and_a_correction_from_the_entry_page(client: Any, acme: Any, hub: Any) -> None:
    old = await _candidate(client, acme, "The pooler cannot do prepared statements.")
    await client.post(f"/v1/projects/acme/entries/{old}/confirm", headers=bearer(acme.owner))
    await login(client, acme.owner)
    page = (await client.get(f"{P}/entries/{old}", headers=HTML)).text
    for form in ("retire-form", "expiry-form", "correct-form"):
        assert f'class="stack {form}"' in page

    day = to_date(hub.clock.now() + 10 * DAY)
    r = await post_form(client, f"{P}/entries/{old}/expiry", {"expires_on": day})
    assert r.status_code == 303 and "notice=expiry_set" in r.headers["location"]
    assert (await _state(client, acme, old))["expires_at"] == f"{day}T00:00:00Z"
    r = await post_form(client, f"{P}/entries/{old}/expiry", {"clear": "1"})
    assert r.status_code == 303 and (await _state(client, acme, old))["expires_at"] is None
    past = await post_form(client, f"{P}/entries/{old}/expiry", {"expires_on": "2001-01-01"})
    assert past.status_code == 422

    r = await post_form(client, f"{P}/entries/{old}/correct", {
        "statement": "The pooler can do prepared statements since PgBouncer 1.21.", "kind": "fact", "reason": "upgraded",
    })
    assert r.status_code == 303
    new_id_ = re.search(r"/entries/(kn_[^?]+)\?", r.headers["location"]).group(1)  # type: ignore[union-attr]
    assert (await _state(client, acme, new_id_))["state"] == "candidate"
    assert (await _state(client, acme, old))["state"] == "trusted"
    old_page = (await client.get(f"{P}/entries/{old}", headers=HTML)).text
    assert f'data-correction-id="{new_id_}"' in old_page and "stays trusted until the correction is trusted" in _text(old_page)
    new_page = (await client.get(f"{P}/entries/{new_id_}", headers=HTML)).text
    assert "This entry is a correction of" in new_page

    r = await post_form(client, f"{P}/entries/{new_id_}/confirm", {})
    assert r.status_code == 303
    assert (await _state(client, acme, old))["state"] == "retired"

    r = await post_form(client, f"{P}/entries/{new_id_}/retire", {"reason": "we dropped the pooler"})
    assert r.status_code == 303 and (await _state(client, acme, new_id_))["state"] == "retired"
    audit = _text((await client.get(f"{P}/audit", headers=HTML)).text)
    assert "Retired by the owner (was trusted): we dropped the pooler." in audit
    assert f"Retired: its correction {new_id_} became trusted (was trusted)." in audit
    assert "Confirmed by the owner (was candidate)." in audit
    assert '{"from"' not in audit


@sqlite_only
async def test_entry_moves_without_csrf_or_from_another_project_change_nothing(client: Any, acme: Any, hub: Any, app: Any) -> None:
    import httpx

    entry_id = await _candidate(client, acme, "The pooler cannot do prepared statements.")
    rival = await make_project(hub, "rival")
    await login(client, acme.owner)
    before = await snapshot(hub)
    for move, data in (("retire", {}), ("expiry", {"clear": "1"}), ("correct", {"statement": "Something else entirely."})):
        r = await post_form(client, f"{P}/entries/{entry_id}/{move}", data, csrf=False)
        assert r.status_code == 403, move
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750") as other:
        await login(other, rival.owner)
        csrf = await csrf_for(other, "/projects/rival/knowledge")
        for move in ("retire", "expiry", "correct"):
            r = await other.post(f"{P}/entries/{entry_id}/{move}", data={"csrf_token": csrf, "statement": "x y z"}, headers=HTML)
            assert r.status_code == 403, move
        r = await other.post(f"{P}/entries/bulk", data={"csrf_token": csrf, "action": "retire", f"pick:{entry_id}": "1"}, headers=HTML)
        assert r.status_code == 403
        r = await other.post(f"/projects/rival/entries/{entry_id}/retire", data={"csrf_token": csrf}, headers=HTML)
        assert r.status_code == 404
    assert await snapshot(hub) == before


# -- tokens -----------------------------------------------------------------------------------


async def test_tokens_are_listed_without_secrets_made_once_and_revoked(client: Any, acme: Any, hub: Any) -> None:
    await login(client, acme.owner)
    page = (await client.get(f"{P}/tokens", headers=HTML)).text
    for name in ("olivia", "agent-7", "reader-1", "agent-9"):
        assert f'data-principal="{name}"' in page
    for secret in (acme.owner, acme.writer, acme.reader, acme.other_writer):
        assert secret not in page and digest(secret) not in page  # neither the secret nor its stored hash

    r = await post_form(client, f"{P}/tokens", {"name": "ci-bot", "level": "write"})
    assert r.status_code == 303 and r.headers["location"] == f"{P}/tokens/new"  # post/redirect/get
    assert "rr_" not in r.headers["location"] + r.text
    r = await client.get(r.headers["location"], headers=HTML)
    secret = re.search(r"<pre class=\"snippet secret\" data-secret>(rr_[^<]+)</pre>", r.text).group(1)  # type: ignore[union-attr]
    assert r.headers["cache-control"] == "no-store"
    learned = await client.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": "The bot works."}, headers=bearer(secret))
    assert learned.status_code == 201
    again = (await client.get(f"{P}/tokens", headers=HTML)).text
    assert secret not in again and 'data-principal="ci-bot"' in again

    token_id = re.search(r'data-token-id="(\d+)" data-principal="ci-bot"', again).group(1)  # type: ignore[union-attr]
    r = await post_form(client, f"{P}/tokens/{token_id}/revoke", {})
    assert r.status_code == 303 and "notice=token_revoked" in r.headers["location"]
    assert (await client.get("/v1/whoami", headers=bearer(secret))).status_code == 401
    audit = _text((await client.get(f"{P}/audit?action=settings", headers=HTML)).text)
    assert "Created a write token for ci-bot." in audit and "Revoked a write token for ci-bot." in audit

    before = await snapshot(hub)
    for data in ({"name": "", "level": "write"}, {"name": "x y", "level": "write"}, {"name": "ok", "level": "admin"}):
        assert (await post_form(client, f"{P}/tokens", data)).status_code == 422, data
    assert (await post_form(client, f"{P}/tokens/{token_id}/revoke", {})).status_code == 404  # revoked already
    assert (await post_form(client, f"{P}/tokens", {"name": "sneaky", "level": "owner"}, csrf=False)).status_code == 403
    assert await snapshot(hub) == before


async def test_the_new_token_page_shows_its_secret_once_and_a_reload_makes_nothing(client: Any, acme: Any, hub: Any) -> None:
    await login(client, acme.owner)
    r = await post_form(client, f"{P}/tokens", {"name": "ci-bot", "level": "read"})
    carried = r.headers["set-cookie"]
    assert r.status_code == 303 and "rr_new_token=" in carried and f"Path={P}/tokens" in carried
    assert "httponly" in carried.lower() and "samesite=strict" in carried.lower()
    before = await snapshot(hub)
    shown = await client.get(f"{P}/tokens/new", headers=HTML)
    secret = re.search(r"data-secret>(rr_[^<]+)</pre>", shown.text).group(1)  # type: ignore[union-attr]
    assert secret not in carried  # sealed, not a copy of the secret
    # A reload: nothing submitted, no secret shown again, no second token.
    again = await client.get(f"{P}/tokens/new", headers=HTML)
    assert again.status_code == 303 and "notice=token_secret_gone" in again.headers["location"]
    page = (await client.get(again.headers["location"], headers=HTML)).text
    assert secret not in page and "shown once" in page
    assert await snapshot(hub) == before
    tokens = (await hub.accounts.tokens("acme"))
    assert [t["principal"] for t in tokens].count("ci-bot") == 1
    # The sealed cookie is bound to the session it was made in: replayed in another
    # session of the same owner, it shows nothing (the browser drops it after one view).
    sealed = re.search(r"rr_new_token=([^;]+)", carried).group(1)  # type: ignore[union-attr]
    await client.post("/logout", data={"csrf_token": await csrf_for(client)}, headers=HTML)
    await login(client, acme.owner)
    client.cookies.set("rr_new_token", sealed, path=f"{P}/tokens")
    assert (await client.get(f"{P}/tokens/new", headers=HTML)).status_code == 303


@sqlite_only
async def test_a_token_of_another_project_cannot_be_revoked_from_here(client: Any, acme: Any, hub: Any) -> None:
    await make_project(hub, "rival")
    rival = await hub.accounts.project("rival")
    rows = await hub.driver.read(lambda q: q.project_tokens(rival.id))
    await login(client, acme.owner)
    before = await snapshot(hub)
    for row in rows:
        r = await post_form(client, f"{P}/tokens/{row['id']}/revoke", {})
        assert r.status_code == 404
    assert await snapshot(hub) == before


@sqlite_only
async def test_revoking_the_token_signed_in_with_ends_the_session(client: Any, acme: Any) -> None:
    await login(client, acme.owner)
    page = (await client.get(f"{P}/tokens", headers=HTML)).text
    own = re.search(r'data-token-id="(\d+)" data-principal="olivia"', page).group(1)  # type: ignore[union-attr]
    row = re.search(rf'<tr data-token-id="{own}".*?</tr>', page, re.S).group(0)  # type: ignore[union-attr]
    assert "this session" in row and "signs you out" in row
    assert page.count("this session") == 1
    assert (await post_form(client, f"{P}/tokens/{own}/revoke", {})).status_code == 303
    follow = await client.get(f"{P}/knowledge", headers=HTML)
    assert follow.status_code == 303 and follow.headers["location"].startswith("/login")


# -- what a person reads ----------------------------------------------------------------------


@sqlite_only
async def test_settings_have_labels_and_help(client: Any, acme: Any) -> None:
    await login(client, acme.owner)
    page = (await client.get(f"{P}/settings", headers=HTML)).text
    names = re.findall(r'<span class="setting-name">([^<]+)</span>', page)
    assert names == [
        "Issuers needed to trust an entry (K)",
        "Contradiction window, in days",
        "Trusted entries before RELAYROOM.md lists knowledge",
        "Entries RELAYROOM.md lists",
        "Demotions per principal per hour",
    ]
    assert "Your own confirm is enough alone" in page and 'aria-describedby="help-k_distinct_issuers"' in page


@sqlite_only
async def test_the_proposals_page_says_how_proposals_arrive(client: Any, acme: Any) -> None:
    await login(client, acme.owner)
    page = _text((await client.get(f"{P}/proposals", headers=HTML)).text)
    assert "How proposals arrive" in page and "POST /v1/projects/acme/proposals" in page


# -- the Checks page --------------------------------------------------------------------------


@sqlite_only
async def test_an_empty_checks_page_shows_the_map_and_the_workflow_step(client: Any, acme: Any) -> None:
    candidate = await _candidate(client, acme, "Migrations run before the deploy.")
    await login(client, acme.owner)
    page = (await client.get(f"{P}/checks", headers=HTML)).text
    assert "No attestation has reached this project yet" in page
    snippet = re.search(r'<pre class="snippet" data-snippet="checkmap">(.*?)</pre>', page, re.S).group(1)  # type: ignore[union-attr]
    assert "project: acme" in snippet and "provider: github-actions" in snippet and candidate in snippet
    step = re.search(r'<pre class="snippet" data-snippet="workflow">(.*?)</pre>', page, re.S).group(1)  # type: ignore[union-attr]
    assert "id-token: write" in step and "outcome: ${{ job.status }}" in step
    assert "uses: ./.github/actions/relayroom-attest" in step and "relayroom ci init github" in page
    assert "gateway-url: http://127.0.0.1:8750" in step
    # A runner on the internet cannot post to this machine: the page says so, and where to read how.
    warning = re.search(r'data-warning="gateway-url">(.*?)</p>', page, re.S).group(1)  # type: ignore[union-attr]
    assert "a CI runner cannot reach it" in warning and "https" in warning and "docs/deployment.md" in warning


async def test_checks_name_issuers_as_people_do_and_link_each_run(client: Any, acme: Any, hub: Any, checkmap_dir: Any) -> None:
    entry_id = await _candidate(client, acme, "Migrations run before the deploy.")
    (checkmap_dir / "acme.yaml").write_text(
        "project: acme\n"
        "issuers:\n"
        "  - provider: github-actions\n"
        "    issuer: http://127.0.0.1:9101\n"
        "    repository: acme/api\n"
        '    repository_id: "123456"\n'
        "    refs: [refs/heads/main]\n"
        "checks:\n"
        "  staging-migrations/postgres_15.upgrade:\n"
        f"    supports: [{entry_id}]\n"
    )
    hub.checkmaps.reload()
    await hub.checkmaps.check_store(hub.driver)
    project = await hub.accounts.project("acme")
    issuer = "oidc:127.0.0.1:9101:acme"
    check = "staging-migrations/postgres_15.upgrade"
    urls = [
        "https://github.com/acme/api/actions/runs/42",
        "javascript:alert(document.cookie)",
        'https://x.example/"><script>alert(1)</script>',
        None,
    ]
    for url in urls:
        now = hub.clock.now()
        await hub.driver.write(
            lambda q, url=url, now=now: q.insert_attestation(new_id("at"), project.id, issuer, check, "success", True, None, {}, url, now)
        )
        hub.clock.advance(1)
    await login(client, acme.owner)
    page = (await client.get(f"{P}/checks", headers=HTML)).text
    section = re.search(rf'<section class="card check" data-check="{re.escape(check)}".*?</section>', page, re.S).group(0)  # type: ignore[union-attr]
    assert f'title="{issuer}">GitHub Actions · acme/api<' in section
    assert ">oidc:127.0.0.1" not in section  # the identity is only a title
    assert "staging-<wbr>migrations/<wbr>postgres_<wbr>15.<wbr>upgrade" in section
    links = re.findall(r'<a class="run-link" href="([^"]*)"', section)
    assert links == ["https://x.example/&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;", "https://github.com/acme/api/actions/runs/42"]
    assert "<script>alert" not in page
    assert 'href="javascript:' not in page and "javascript:alert(document.cookie)" in section  # shown as text
    assert "no link sent" in section
