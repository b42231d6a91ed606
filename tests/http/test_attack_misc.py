"""Attacks of issue 11, findings 7, 9 and 10, tried as an attacker would.

- A dripping issuer: an issuer (anyone can run one a check map names, or sit
  on its path) that answers discovery or JWKS one byte at a time, drips its
  headers, never answers, or sends a huge body slowly.  Every attestation
  waiting on its keys answers 503 `jwks_unavailable` with Retry-After within
  about the fetch deadline, and nothing is recorded.
- Inputs that answered 500: cursors no listing handed out, settings out of
  the contract's ranges through every door, and a project whose stored
  settings are already out of range (an old database).
- Sessions that outlived sign-out: a copied cookie replayed after logout, a
  revoked owner token, forged and tampered cookies.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.support.attest_fixtures import checkmap, github_binding, learn, write_map
from tests.support.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.support.drip_server import DISCOVERY, JWKS, DripIssuer
from tests.support.helpers import snapshot
from tests.support.oidc_issuer import OidcIssuer

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])

DEADLINE = 0.4  # the fetch deadline these tests run with (5 s in service)
SLACK = 0.8  # the event loop, the store and the answer, on a busy CI machine


# -- a dripping issuer ------------------------------------------------------------------------


@pytest.fixture
async def drip(issuer: OidcIssuer) -> Any:
    async with DripIssuer(keys_from=issuer, interval=0.2) as running:
        yield running


async def _bind(hub: Any, checkmap_dir: Any, drip: DripIssuer) -> str:
    entry = await learn(hub, "acme", "Migrations run in staging first.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(drip.url), {"migrations": [entry]}))
    hub.keys.fetcher.timeout = DEADLINE
    return entry


async def _attest(client: httpx.AsyncClient, token: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await client.post(
        "/v1/attestations", json={"check": "migrations", "outcome": "success"}, headers={"Authorization": f"Bearer {token}"}
    )
    return response, time.monotonic() - started


def _unavailable(response: httpx.Response, elapsed: float) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "jwks_unavailable"
    assert int(response.headers["retry-after"]) >= 1
    assert elapsed < DEADLINE + SLACK, f"held {elapsed:.2f} s by the issuer"


@sqlite_only
@pytest.mark.parametrize(
    "modes",
    [
        {DISCOVERY: "drip_body"},
        {DISCOVERY: "drip_headers"},
        {DISCOVERY: "silent"},
        {JWKS: "drip_body"},  # discovery answers at once, the key set drips
        {JWKS: "drip_headers"},
        {JWKS: "silent"},
        {JWKS: "huge_slow"},  # 400 KiB in 16 KiB chunks: the deadline ends it before the size cap does
    ],
    ids=lambda m: "+".join(f"{p.rsplit('/', 1)[1]}={v}" for p, v in m.items()),
)
async def test_a_dripping_issuer_holds_no_attestation_past_the_deadline(
    client: Any, hub: Any, acme: Any, checkmap_dir: Any, drip: DripIssuer, clock: Any, modes: dict[str, str]
) -> None:
    await _bind(hub, checkmap_dir, drip)
    drip.modes.update(modes)
    before = await snapshot(hub)
    # Two CI jobs at once: the second waits on the first one's refresh, no longer.
    (first, t1), (second, t2) = await asyncio.gather(
        _attest(client, drip.token(clock.now())), _attest(client, drip.token(clock.now()))
    )
    _unavailable(first, t1)
    _unavailable(second, t2)
    assert await snapshot(hub) == before


async def test_after_a_dripped_refresh_the_cooldown_answers_at_once_and_then_keys_work(
    client: Any, hub: Any, acme: Any, checkmap_dir: Any, drip: DripIssuer, clock: Any
) -> None:
    await _bind(hub, checkmap_dir, drip)
    drip.modes[JWKS] = "drip_body"
    before = await snapshot(hub)
    response, elapsed = await _attest(client, drip.token(clock.now()))
    _unavailable(response, elapsed)
    assert int(response.headers["retry-after"]) == 60
    hits = dict(drip.hits)
    response, elapsed = await _attest(client, drip.token(clock.now()))
    _unavailable(response, elapsed)
    assert elapsed < 0.3 and drip.hits == hits  # inside the cooldown: no fetch at all
    assert await snapshot(hub) == before
    # The issuer mends; after the cooldown the job's retry is counted.
    drip.modes.clear()
    clock.advance(61)
    response, _ = await _attest(client, drip.token(clock.now()))
    assert response.status_code == 201 and response.json()["counted"] is True


@sqlite_only
async def test_a_slow_but_honest_issuer_inside_the_deadline_is_served(
    client: Any, hub: Any, acme: Any, checkmap_dir: Any, drip: DripIssuer, clock: Any
) -> None:
    await _bind(hub, checkmap_dir, drip)
    hub.keys.fetcher.timeout = 3.0
    drip.interval = 0.01
    drip.modes[DISCOVERY] = "drip_body"  # about 80 bytes, one per 10 ms: slow, well inside 3 s
    response, _ = await _attest(client, drip.token(clock.now()))
    assert response.status_code == 201, response.text


# -- inputs that answered 500: cursors ------------------------------------------------------


def _b64(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


BAD_CURSORS = [
    _b64("s" + "9" * 40),  # the 40-digit number: OverflowError in SQLite
    _b64(f"s{2**63}"),  # one past a 64-bit key
    _b64("s-5"),  # negative
    _b64("s 5"),  # int() would strip the space
    _b64("s1_000"),  # int() would take the underscore
    _b64("s\u0665\u0665"),  # Arabic-Indic digits: int() takes them too
    _b64("s05"),  # not a form this API hands out
    "A" * 60,  # huge base64 (under the 64-character query limit)
    "%%%",  # not base64
    "\u00e9\u00e9\u00e9",  # unicode
    _b64("e12"),  # another prefix
    "czU=====",  # padding run wild
    "czU!!",  # stray characters a lenient decoder would drop
]

CURSOR_LISTINGS = ["/v1/projects/acme/entries", "/v1/projects/acme/audit", "/v1/projects/acme/proposals"]
CURSOR_PAGES = ["/projects/acme/knowledge", "/projects/acme/audit", "/projects/acme/proposals"]


async def test_no_cursor_answers_500_on_any_listing(client: Any, hub: Any, acme: Any) -> None:
    from tests.support.dashboard_helpers import HTML, login

    await learn(hub, "acme", "A first entry to page over.")
    await login(client, acme.owner)
    before = await snapshot(hub)
    for cursor in BAD_CURSORS:
        for path in CURSOR_LISTINGS:
            r = await client.get(path, params={"cursor": cursor}, headers={"Authorization": f"Bearer {acme.owner}"})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_cursor", (path, cursor, r.text)
        for path in CURSOR_PAGES:
            r = await client.get(path, params={"cursor": cursor}, headers=HTML)
            assert r.status_code == 422, (path, cursor, r.status_code)
    assert await snapshot(hub) == before


@sqlite_only
async def test_a_cursor_of_another_listing_is_only_a_position(client: Any, hub: Any, acme: Any) -> None:
    """Every listing's cursor is a row key: one handed out by the audit ledger
    reads, on /entries, as "before that key", never as anything more."""
    owner = {"Authorization": f"Bearer {acme.owner}"}
    for n in range(3):
        await learn(hub, "acme", f"Entry number {n} for paging.")
    audit = (await client.get("/v1/projects/acme/audit", params={"limit": 1}, headers=owner)).json()
    assert audit["next_cursor"]
    for path in CURSOR_LISTINGS:
        r = await client.get(path, params={"cursor": audit["next_cursor"]}, headers=owner)
        assert r.status_code == 200, r.text
    reader = {"Authorization": f"Bearer {acme.reader}"}
    page = (await client.get("/v1/projects/acme/entries", params={"cursor": audit["next_cursor"]}, headers=reader)).json()
    assert all(e["state"] == "trusted" for e in page["entries"])  # a read token still sees only trusted entries


# -- inputs that answered 500: settings out of range ------------------------------------------

NAN, HUGE = "NaN", "1e309"  # raw JSON: the first is not JSON at all, the second overflows a double
BAD_SETTINGS: dict[str, list[Any]] = {
    "k_distinct_issuers": [0, -1, 101, 1e7, 2.5, True, "2", None, NAN, HUGE, 10**30],
    "window_days": [0, -0.0, -1, 3651, 3650.001, 1e7, True, "2", None, NAN, HUGE, "Infinity"],
    "playbook_min_trusted": [-1, 1_000_001, 1e7, 0.5, True, "2", NAN, HUGE, 10**30],
    "playbook_top_n": [0, -1, 101, 1e7, True, "2", NAN, HUGE],
    "demotions_per_hour": [0, -1, 1_000_001, 1e7, False, "2", NAN, HUGE, [1], {"v": 1}],
}
EDGES = {"k_distinct_issuers": 100, "window_days": 3650, "playbook_min_trusted": 1_000_000, "playbook_top_n": 100,
         "demotions_per_hour": 1_000_000}


def _raw_setting(name: str, value: Any) -> bytes:
    import json

    if value in (NAN, HUGE, "Infinity"):
        return f'{{"{name}": {value}}}'.encode()
    return json.dumps({name: value}).encode()


@sqlite_only
async def test_settings_out_of_range_are_refused_through_the_api(client: Any, hub: Any, acme: Any) -> None:
    owner = {"Authorization": f"Bearer {acme.owner}", "Content-Type": "application/json"}
    settings = (await client.get("/v1/projects/acme/settings", headers=owner)).json()
    before = await snapshot(hub)
    for name, values in BAD_SETTINGS.items():
        for value in values:
            r = await client.patch("/v1/projects/acme/settings", content=_raw_setting(name, value), headers=owner)
            assert r.status_code in (400, 422), (name, value, r.status_code)
            assert r.json()["error"]["code"] in ("invalid_setting", "malformed_json"), (name, value, r.text)
    assert await snapshot(hub) == before
    assert (await client.get("/v1/projects/acme/settings", headers=owner)).json() == settings
    # The ends of each range are in it.
    r = await client.patch("/v1/projects/acme/settings", json=EDGES, headers=owner)
    assert r.status_code == 200 and r.json() == EDGES


@sqlite_only
async def test_settings_out_of_range_are_refused_through_the_dashboard_form(client: Any, hub: Any, acme: Any) -> None:
    from tests.support.dashboard_helpers import login, post_form

    await login(client, acme.owner)
    before = await snapshot(hub)
    for name, raw in [
        ("window_days", "1e7"), ("window_days", "3651"), ("window_days", "inf"), ("window_days", "nan"),
        ("window_days", "1e309"), ("window_days", "9" * 5000), ("k_distinct_issuers", "101"),
        ("k_distinct_issuers", "9" * 5000), ("playbook_min_trusted", "1000001"), ("demotions_per_hour", "-1"),
        ("playbook_top_n", "0"),
    ]:
        r = await post_form(client, "/projects/acme/settings", {name: raw})
        assert r.status_code == 422, (name, raw[:20], r.status_code)
    assert await snapshot(hub) == before
    page = (await client.get("/projects/acme/settings", headers={"Accept": "text/html"})).text
    assert 'max="3650"' in page and 'max="100"' in page  # the browser is told the ranges too


@sqlite_only
async def test_settings_out_of_range_are_refused_at_project_creation_and_import(hub: Any, acme: Any) -> None:
    import json

    from gateway.core.errors import Invalid
    from gateway.knowledge.transfer import TransferError, export_project, import_project

    for k, window in [(101, None), (0, None), (None, 1e7), (None, 3651), (None, float("nan")), (None, float("inf"))]:
        with pytest.raises(Invalid):
            await hub.accounts.create_project("beta", k=k, window_days=window)
    assert await hub.driver.read(lambda q: q.project_by_slug("beta")) is None
    exported = json.dumps(await export_project(hub.driver, hub.clock, "acme"))
    for name, value in [("window_days", 1e7), ("k_distinct_issuers", 1000), ("playbook_top_n", 10**30),
                        ("demotions_per_hour", 0), ("window_days", float("inf"))]:
        records = json.loads(exported)
        for record in records:
            if record["record"] == "project":
                record["slug"] = "gamma"
                record["settings"][name] = value
            if record["record"] == "header":
                record["project"] = "gamma"
        with pytest.raises(TransferError, match=name):
            await import_project(hub.driver, [json.dumps(r) for r in records])
    assert await hub.driver.read(lambda q: q.project_by_slug("gamma")) is None


def test_the_cli_refuses_settings_out_of_range(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env["RELAYROOM_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"
    env["RELAYROOM_CHECKMAPS"] = str(tmp_path / "checkmaps")
    for args in (["--window-days", "1e7"], ["--k", "101"]):
        result = subprocess.run([sys.executable, "-m", "gateway", "project", "create", "acme", *args],
                                env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert ("window_days" if "--window-days" in args else "k_distinct_issuers") in result.stderr


# -- a value already stored out of range (an old database) -------------------------------------

STORED = [
    {"window_days": 1e7},  # the issue's: a contradiction `until` in the year 29405
    {"window_days": 1e300},  # `until` overflows to inf
    {"k_distinct_issuers": 10**9, "playbook_top_n": 10**12, "playbook_min_trusted": 0, "demotions_per_hour": 10**12},
]


@pytest.mark.parametrize("stored", STORED, ids=["window-1e7", "window-1e300", "huge-integers"])
async def test_a_project_stored_out_of_range_still_answers_everywhere(
    client: Any, hub: Any, acme: Any, stored: dict[str, Any]
) -> None:
    from tests.support.dashboard_helpers import HTML, login, post_form

    owner = {"Authorization": f"Bearer {acme.owner}"}
    entries = [await learn(hub, "acme", f"Stored range entry {n}.") for n in range(2)]
    assignments = ", ".join(f"{name} = ?" for name in stored)
    await hub.driver.write(lambda q: q.tx.run(f"UPDATE projects SET {assignments} WHERE slug = ?", *stored.values(), "acme"))
    # refute, then confirm: the block's date is printed
    r = await client.post(f"/v1/projects/acme/entries/{entries[0]}/refute", json={"reason": "wrong"}, headers=owner)
    assert r.status_code == 200, r.text
    r = await client.post(f"/v1/projects/acme/entries/{entries[0]}/confirm", headers=owner)
    assert r.status_code in (200, 409), r.text
    await login(client, acme.owner)
    r = await post_form(client, f"/projects/acme/entries/{entries[1]}/refute", {"reason": "also wrong"})
    assert r.status_code == 303
    r = await post_form(client, f"/projects/acme/entries/{entries[1]}/confirm", {})
    assert r.status_code in (303, 409)
    for path in ["/v1/projects/acme/entries", f"/v1/projects/acme/entries/{entries[0]}", "/v1/projects/acme/audit",
                 "/v1/projects/acme/proposals", "/v1/projects/acme/settings", "/v1/projects/acme/learning",
                 "/projects/acme/RELAYROOM.md"]:
        r = await client.get(path, headers=owner)
        assert r.status_code == 200, (path, r.text)
    for path in ["/projects/acme/knowledge", f"/projects/acme/entries/{entries[0]}", "/projects/acme/audit",
                 "/projects/acme/proposals", "/projects/acme/settings", "/projects/acme/learning",
                 "/projects/acme/checks", "/projects/acme/playbook", "/projects/acme/RELAYROOM.md"]:
        r = await client.get(path, headers=HTML)
        assert r.status_code == 200, (path, r.status_code)


# -- sessions that outlived sign-out ---------------------------------------------------------


async def _sessions(hub: Any) -> int:
    return await hub.driver.read(lambda q: q.count_rows("dashboard_sessions"))


async def _second_browser(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750")


async def test_a_copied_cookie_is_worth_nothing_after_sign_out(client: Any, app: Any, hub: Any, acme: Any) -> None:
    from tests.support.dashboard_helpers import HTML, csrf_for, login

    entry = await learn(hub, "acme", "Copied cookies must die with the session.")
    await login(client, acme.owner)
    csrf = await csrf_for(client)
    stolen = client.cookies.get("rr_session")
    r = await client.post("/logout", data={"csrf_token": csrf}, headers=HTML)
    assert r.status_code == 303
    before = await snapshot(hub)
    async with await _second_browser(app) as thief:
        thief.cookies.set("rr_session", stolen)
        # a page, RELAYROOM.md, a POST with the session's own CSRF token, the sign-out itself
        assert (await thief.get("/projects/acme/knowledge", headers=HTML)).status_code == 303
        assert (await thief.get("/projects/acme/knowledge")).json()["error"]["code"] == "missing_session"
        assert (await thief.get("/projects/acme/RELAYROOM.md")).status_code == 401
        r = await thief.post(f"/projects/acme/entries/{entry}/confirm", data={"csrf_token": csrf}, headers=HTML)
        assert r.status_code == 403
        r = await thief.post("/projects/acme/settings", data={"csrf_token": csrf, "k_distinct_issuers": "1"}, headers=HTML)
        assert r.status_code == 403
    assert await snapshot(hub) == before
    assert (await client.get(f"/v1/projects/acme/entries/{entry}", headers={"Authorization": f"Bearer {acme.owner}"})).json()["state"] == "candidate"


async def test_a_get_of_logout_never_signs_out(client: Any, app: Any, hub: Any, acme: Any) -> None:
    """A GET never changes state: a page on a sibling origin (another port of
    this host, a sibling subdomain; SameSite does not stop those) could load
    `<img src=/logout>` with the owner's cookie.  The GET shows the sign-out
    button; only its POST, with the CSRF token, signs out."""
    from tests.support.dashboard_helpers import HTML, csrf_from, login

    await login(client, acme.owner)
    for headers in (HTML, {"Accept": "image/avif,image/webp,*/*", "Sec-Fetch-Dest": "image",
                           "Referer": "http://127.0.0.1:9999/cat.html"}, {}):
        r = await client.get("/logout", headers=headers)
        assert r.status_code == 200, r.status_code
        assert "set-cookie" not in r.headers
        assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 200
    form = (await client.get("/logout", headers=HTML)).text
    assert 'action="/logout"' in form and 'method="post"' in form
    assert (await client.head("/logout")).status_code in (200, 405)
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 200
    # A forged POST (no token, another session's token) is refused and ends nothing.
    for data in ({}, {"csrf_token": "0" * 64}):
        assert (await client.post("/logout", data=data, headers=HTML)).status_code == 403
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 200
    r = await client.post("/logout", data={"csrf_token": csrf_from(form)}, headers=HTML)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 303
    # Signed out, the GET sends a browser to sign in and still changes nothing.
    r = await client.get("/logout", headers=HTML)
    assert r.status_code == 303 and r.headers["location"] == "/login"


@sqlite_only
async def test_signing_out_in_one_browser_leaves_the_owners_other_browser_signed_in(
    client: Any, app: Any, hub: Any, acme: Any
) -> None:
    """Sign-out ends the session it is sent from; revoking the token ends them all."""
    from tests.support.dashboard_helpers import HTML, csrf_for, login

    async with await _second_browser(app) as laptop:
        await login(client, acme.owner)
        await login(laptop, acme.owner)
        assert client.cookies.get("rr_session") != laptop.cookies.get("rr_session")
        assert await _sessions(hub) == 2
        await client.post("/logout", data={"csrf_token": await csrf_for(client)}, headers=HTML)
        assert (await laptop.get("/projects/acme/knowledge", headers=HTML)).status_code == 200
        await hub.accounts.revoke_tokens("acme", "olivia")
        assert (await laptop.get("/projects/acme/knowledge", headers=HTML)).status_code == 303


async def test_a_revoked_owner_token_kills_every_copy_of_its_session(client: Any, app: Any, hub: Any, acme: Any) -> None:
    from tests.support.dashboard_helpers import HTML, csrf_for, login

    entry = await learn(hub, "acme", "Revoked owners confirm nothing.")
    await login(client, acme.owner)
    csrf = await csrf_for(client)
    copied = client.cookies.get("rr_session")
    await hub.accounts.revoke_tokens("acme", "olivia")
    before = await snapshot(hub)
    async with await _second_browser(app) as other:
        other.cookies.set("rr_session", copied)
        for browser in (client, other):
            assert (await browser.get("/projects/acme/knowledge", headers=HTML)).status_code == 303
            r = await browser.post(f"/projects/acme/entries/{entry}/confirm", data={"csrf_token": csrf}, headers=HTML)
            assert r.status_code == 403
    assert await snapshot(hub) == before
    # A new owner token of the same name does not revive the old session.
    await hub.accounts.create_token("acme", "owner", "olivia")
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 303


@sqlite_only
async def test_forged_and_tampered_cookies_are_refused(client: Any, hub: Any, acme: Any) -> None:
    import secrets

    from gateway.accounts.sessions import session_hash
    from gateway.web.session import sign, signing_key
    from tests.support.dashboard_helpers import HTML, login

    await login(client, acme.owner)
    good = client.cookies.get("rr_session")
    key = await signing_key(hub)
    session_id = good.split(".")[0]
    forged = [
        sign(secrets.token_bytes(32), secrets.token_urlsafe(32)),  # signed with another key
        good[:-2] + ("AA" if not good.endswith("AA") else "BB"),  # tampered signature
        session_id,  # the payload without its signature
        sign(key, secrets.token_urlsafe(32)),  # the real key (a leaked secret) but no session on the server
        sign(key, session_hash("x")),  # a hash of the store's as the id
        "x" * 5000,  # oversized
        good + "." + good,  # two cookies glued
    ]
    before, sessions = await snapshot(hub), await _sessions(hub)
    for value in forged:
        client.cookies.set("rr_session", value)
        assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 303, value[:40]
    assert await snapshot(hub) == before and await _sessions(hub) == sessions
    client.cookies.set("rr_session", good)
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 200
    hub.clock.advance(12 * 3600 + 1)  # past its expiry on the server
    assert (await client.get("/projects/acme/knowledge", headers=HTML)).status_code == 303


async def test_a_session_ended_by_one_process_is_ended_for_another(
    client: Any, hub: Any, acme: Any, config: Any, clock: Any
) -> None:
    """Two gateway processes on one store: signing out on one ends it on both."""
    from gateway.hub import Hub
    from gateway.web.app import build_app
    from tests.support.dashboard_helpers import HTML, csrf_for, login

    other_hub = Hub(config, clock=clock)
    await other_hub.start(background=False)
    try:
        other_app = build_app(other_hub, manage_hub=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=other_app), base_url="http://127.0.0.1:8750") as there:
            await login(client, acme.owner)
            there.cookies.set("rr_session", client.cookies.get("rr_session"))
            assert (await there.get("/projects/acme/knowledge", headers=HTML)).status_code == 200
            await client.post("/logout", data={"csrf_token": await csrf_for(client)}, headers=HTML)
            assert (await there.get("/projects/acme/knowledge", headers=HTML)).status_code == 303
    finally:
        await other_hub.stop()
