"""Bad input on every endpoint: the contract's error body, the right status,
never a 500, and nothing changed in the store."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.conftest import ProjectTokens
from tests.support.helpers import bearer, learn, snapshot

JSON_ENDPOINTS = [
    ("POST", "/v1/projects/acme/entries"),
    ("POST", "/v1/projects/acme/entries/{id}/refute"),
    ("POST", "/v1/projects/acme/events"),
    ("POST", "/v1/projects/acme/recall_used"),
    ("PATCH", "/v1/projects/acme/settings"),
]

MALFORMED = [
    ("not json", b"{nope", "application/json", 400),
    ("json array", b"[1, 2]", "application/json", 400),
    ("json string", b'"hello"', "application/json", 400),
    ("invalid utf-8", b'{"kind": "\xff"}', "application/json", 400),
    ("form encoded", b"kind=fact&statement=x", "application/x-www-form-urlencoded", 415),
    ("no content type", b'{"kind": "fact"}', "", 415),
    ("deep nesting under the size limit", b"[" * 30000 + b"]" * 30000, "application/json", 400),
    ("over the size limit", b"[" * 40000 + b"]" * 40000, "application/json", 413),
]


def assert_error(r: httpx.Response, status: int) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert isinstance(body["error"]["code"], str) and body["error"]["code"].replace("_", "").isalnum()
    assert body["error"]["code"] == body["error"]["code"].lower()
    assert isinstance(body["error"]["message"], str) and len(body["error"]["message"]) > 10


@pytest.mark.parametrize("label,raw,ctype,status", MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_malformed_bodies(
    client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, label: str, raw: bytes, ctype: str, status: int
) -> None:
    entry = await learn(client, "acme", acme.owner, "Target entry.")
    before = await snapshot(hub)
    for method, template in JSON_ENDPOINTS:
        headers = {**bearer(acme.owner), **({"Content-Type": ctype} if ctype else {})}
        r = await client.request(method, template.format(id=entry["id"]), content=raw, headers=headers)
        assert_error(r, status)
    assert await snapshot(hub) == before


async def test_body_over_64_kib(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    before = await snapshot(hub)
    big = {"kind": "fact", "statement": "x" * (65 * 1024)}
    r = await client.post("/v1/projects/acme/entries", json=big, headers=bearer(acme.writer))
    assert_error(r, 413)
    # the limit holds without a Content-Length too (chunked upload)
    async def chunks() -> Any:
        for _ in range(70):
            yield b"x" * 1024

    r = await client.post("/v1/projects/acme/entries", content=chunks(), headers={**bearer(acme.writer), "Content-Type": "application/json"})
    assert_error(r, 413)
    assert await snapshot(hub) == before


async def test_authorization_header_over_16_kib(client: httpx.AsyncClient, hub: Any) -> None:
    before = await snapshot(hub)
    r = await client.get("/v1/projects/acme/entries", headers={"Authorization": "Bearer " + "a" * (17 * 1024)})
    assert r.status_code in (413, 431)
    assert r.json()["error"]["code"] == "header_too_large"
    assert await snapshot(hub) == before


INVALID_LEARN = [
    ({"kind": "rumour", "statement": "x"}, "invalid_kind"),
    ({"kind": "fact"}, "missing_field"),
    ({"statement": "no kind"}, "missing_field"),
    ({"kind": "fact", "statement": ""}, "invalid_field"),
    ({"kind": "fact", "statement": "   "}, "invalid_field"),
    ({"kind": "fact", "statement": 42}, "invalid_field"),
    ({"kind": "fact", "statement": ["a"]}, "invalid_field"),
    ({"kind": "fact", "statement": "x" * 2001}, "invalid_field"),
    ({"kind": "fact", "statement": "nul \x00 byte"}, "invisible_text"),
    ({"kind": "fact", "statement": "x", "evidence": 5}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "ttl_days": 0}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "ttl_days": -3}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "ttl_days": "7"}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "ttl_days": True}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "ttl_days": 1e308}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "expires_at": "yesterday"}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "expires_at": "2020-01-01T00:00:00Z"}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "expires_at": "2030-01-01T00:00:00"}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "expires_at": 12345}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "ttl_days": 3, "expires_at": "2099-01-01T00:00:00Z"}, "invalid_field"),
    ({"kind": "fact", "statement": "x", "state": "trusted"}, "unknown_field"),
    ({"kind": "fact", "statement": "x", "trusted": True}, "unknown_field"),
    ({"kind": "fact", "statement": "x", "promoted_by": "owner:me"}, "unknown_field"),
    ({"kind": "fact", "statement": "x", "created_by": "olivia"}, "unknown_field"),
    ({"kind": "fact", "statement": "x", "supports": [{"issuer": "oidc:x"}]}, "unknown_field"),
]


@pytest.mark.parametrize("body,code", INVALID_LEARN, ids=[str(i) for i in range(len(INVALID_LEARN))])
async def test_invalid_learn(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, body: dict[str, Any], code: str) -> None:
    before = await snapshot(hub)
    r = await client.post("/v1/projects/acme/entries", json=body, headers=bearer(acme.writer))
    assert_error(r, 422)
    assert r.json()["error"]["code"] == code
    assert await snapshot(hub) == before


async def test_invalid_events_refutes_and_queries(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "A target.")
    before = await snapshot(hub)
    cases: list[tuple[str, str, Any, int]] = [
        ("POST", "/v1/projects/acme/events", {"type": "error"}, 422),
        ("POST", "/v1/projects/acme/events", {"type": "error", "detail": "text"}, 422),
        ("POST", "/v1/projects/acme/events", {"type": "error", "detail": {"contradicts": 7}}, 422),
        ("POST", "/v1/projects/acme/events", {"type": "", "detail": {}}, 422),
        ("POST", "/v1/projects/acme/events", {"type": "x" * 101, "detail": {}}, 422),
        ("POST", "/v1/projects/acme/events", {"type": "error", "detail": {}, "effect": "support"}, 422),
        ("POST", "/v1/projects/acme/events", {"type": "error", "detail": {"contradicts": "kn_unknown"}}, 404),
        ("POST", f"/v1/projects/acme/entries/{entry['id']}/refute", {}, 422),
        ("POST", f"/v1/projects/acme/entries/{entry['id']}/refute", {"reason": ""}, 422),
        ("POST", f"/v1/projects/acme/entries/{entry['id']}/refute", {"reason": "x", "state": "candidate"}, 422),
        ("POST", "/v1/projects/acme/entries/kn_missing/refute", {"reason": "x"}, 404),
        ("POST", "/v1/projects/acme/entries/kn_missing/confirm", None, 404),
        ("POST", f"/v1/projects/acme/entries/{entry['id']}/confirm", {"force": True}, 422),
        ("POST", "/v1/projects/acme/recall_used", {"recall_id": "rc_x"}, 422),
        ("POST", "/v1/projects/acme/recall_used", {"recall_id": "rc_x", "entry_id": entry["id"]}, 404),
        ("POST", "/v1/projects/acme/recall_used", {"recall_id": 1, "entry_id": 2}, 422),
        ("GET", "/v1/projects/acme/entries?state=golden", None, 422),
        ("GET", "/v1/projects/acme/entries?kind=rumour", None, 422),
        ("GET", "/v1/projects/acme/entries?limit=0", None, 422),
        ("GET", "/v1/projects/acme/entries?limit=abc", None, 422),
        ("GET", "/v1/projects/acme/entries?limit=100000", None, 422),
        ("GET", "/v1/projects/acme/entries?cursor=%00%01garbage", None, 422),
        ("GET", "/v1/projects/acme/entries?cursor=czE5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5", None, 422),
        ("GET", "/v1/projects/acme/recall?q=x&limit=51", None, 422),
        ("GET", "/v1/projects/acme/recall?q=x&limit=-1", None, 422),
        ("GET", "/v1/projects/acme/recall?q=x&kind=rumour", None, 422),
        ("GET", "/v1/projects/acme/recall?q=" + "x" * 2001, None, 422),
        ("GET", "/v1/projects/acme/audit?limit=100000", None, 422),
        ("GET", "/v1/projects/acme/audit?cursor=zzz", None, 422),
        # "s" and a 40-digit number: valid base64, an integer SQLite cannot bind
        ("GET", "/v1/projects/acme/entries?cursor=czk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk", None, 422),
        ("GET", "/v1/projects/acme/audit?cursor=czk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk", None, 422),
        ("GET", "/v1/projects/acme/proposals?cursor=czk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk", None, 422),
        ("PATCH", "/v1/projects/acme/settings", {"window_days": 1e7}, 422),
        ("PATCH", "/v1/projects/acme/settings", {"k_distinct_issuers": 101}, 422),
        ("PATCH", "/v1/projects/acme/settings", {"demotions_per_hour": 1_000_001}, 422),
        ("GET", "/v1/projects/acme/entries/kn_missing", None, 404),
        ("DELETE", f"/v1/projects/acme/entries/{entry['id']}", None, 405),
        ("GET", "/v1/nothing/here", None, 404),
    ]
    for method, path, body, status in cases:
        r = await client.request(method, path, json=body, headers=bearer(acme.owner))
        assert_error(r, status)
    assert await snapshot(hub) == before


@pytest.mark.parametrize("levels", [33, 999])
async def test_an_event_detail_nested_too_deep_is_422_and_writes_nothing(
    client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, levels: int
) -> None:
    """The JSON parser takes about a thousand levels; a detail that deep once
    exhausted the stack of the code walking it (a 500)."""
    before = await snapshot(hub)
    body = b'{"type": "error", "detail": ' + b'{"a": ' * (levels - 1) + b"[1]" + b"}" * (levels - 1) + b"}"
    r = await client.post("/v1/projects/acme/events", content=body, headers={**bearer(acme.writer), "content-type": "application/json"})
    assert_error(r, 422)
    assert r.json()["error"]["code"] == "invalid_field" and "32 levels" in r.json()["error"]["message"]
    assert await snapshot(hub) == before


async def test_an_event_detail_32_levels_deep_and_a_notes_joined_emoji_are_recorded(
    client: httpx.AsyncClient, acme: ProjectTokens
) -> None:
    """Only an error event's detail is text the owner reviews: another event's
    detail may hold a family emoji (joined by U+200D)."""
    body = b'{"type": "note", "detail": ' + b'{"a": ' * 31 + rb'"\ud83d\udc68\u200d\ud83d\udc69"' + b"}" * 31 + b"}"
    r = await client.post("/v1/projects/acme/events", content=body, headers={**bearer(acme.writer), "content-type": "application/json"})
    assert r.status_code == 202 and r.json()["effect"] == "none", r.text


async def test_hostile_recall_queries_are_safe(client: httpx.AsyncClient, hub: Any, acme: ProjectTokens) -> None:
    entry = await learn(client, "acme", acme.writer, "Quotes \"and\" NEAR(operators) are text.")
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    for q in ['"', '""', "a AND", "OR OR", "NEAR(a b)", "col:val", "x*", "-x", "^x", "(", ")", "{a b}", "\\", "'; DROP TABLE entries; --",
              "NOT", "✓ emoji 🚀", "\u0000", "quotes \"and\"", "a" * 2000, "   ", ""]:
        r = await client.get("/v1/projects/acme/recall", params={"q": q}, headers=bearer(acme.reader))
        assert r.status_code == 200, (q, r.text)
        assert isinstance(r.json()["entries"], list)


async def test_a_method_a_path_does_not_serve_is_405_naming_every_method_it_does(
    client: httpx.AsyncClient, acme: ProjectTokens
) -> None:
    """RFC 9110: a 405 lists in `Allow` the methods the path serves.  A path
    served by two routes (GET and POST of /entries) lists both, and one that
    also fits another route's pattern (/entries/bulk fits
    /entries/{entry_id}, whose GET answers 404 for it) lists those too: the
    router's first fitting route alone named GET only, or POST only.  The
    static files' mount names no methods: GET and HEAD, not an empty Allow."""
    documented = (await client.get("/openapi.json")).json()["paths"]
    values = {"project": "acme", "entry_id": "kn_x", "proposal_id": "pr_x", "thread_id": "t1", "source": "ci",
              "sha256": "0" * 64}
    patterns = {t: re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", t) + "$") for t in documented}
    checked = 0
    for template in documented:
        if not template.startswith("/v1/"):
            continue
        path = template.format(**values)
        served = {m.upper() for t, p in patterns.items() if p.match(path) for m in documented[t]}
        served |= {"HEAD"} if "GET" in served else set()
        for method in ("DELETE", "PUT", "PATCH", "POST"):
            if method in served:
                continue
            r = await client.request(method, path, headers=bearer(acme.owner))
            assert r.status_code == 405, (method, path, r.status_code)
            assert r.json()["error"]["code"] == "method_not_allowed"
            assert set(r.headers["allow"].split(", ")) == served, (method, path, r.headers["allow"])
            checked += 1
    assert checked > 40
    r = await client.post("/static/dashboard.css")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD", r.headers.get("allow")
