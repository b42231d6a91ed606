"""RELAYROOM.md: the base playbook, then the top trusted entries once the
project has enough of them; never a candidate or an expired entry; ETag."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.clock import DAY
from gateway.knowledge.playbook import SECTION_HEADING, PlaybookEntry, etag, etag_matches, render
from tests.support.helpers import bearer

URL = "/projects/acme/RELAYROOM.md"


def _e(i: int, kind: str, uses: int, statement: str | None = None) -> PlaybookEntry:
    return PlaybookEntry(id=f"kn_{i}", kind=kind, statement=statement or f"statement {i}", uses=uses)


def test_render_below_the_threshold_is_the_base_alone() -> None:
    assert render("# Base\n", 4, [_e(1, "fact", 0)], min_trusted=5) == "# Base\n"


def test_render_groups_by_kind_most_used_first() -> None:
    top = [_e(1, "pitfall", 9), _e(2, "fact", 7), _e(3, "pitfall", 3), _e(4, "convention", 3), _e(5, "fact", 0)]
    text = render("# Base", 5, top, min_trusted=5)
    assert text.startswith("# Base\n\n" + SECTION_HEADING + "\n")
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### Pitfalls", "### Facts", "### Conventions"]
    order = [line for line in text.splitlines() if line.startswith("- ")]
    assert order == [
        "- statement 1 (`kn_1`)", "- statement 3 (`kn_3`)",
        "- statement 2 (`kn_2`)", "- statement 5 (`kn_5`)",
        "- statement 4 (`kn_4`)",
    ]


def test_render_keeps_each_statement_on_one_line() -> None:
    text = render("", 1, [_e(1, "fact", 0, "first line\n## Injected heading\n- fake item")], min_trusted=1)
    assert "\n## Injected" not in text and "- first line ## Injected heading - fake item (`kn_1`)" in text


def test_etag_comparison() -> None:
    tag = etag("hello")
    assert etag_matches(tag, tag) and etag_matches(f'"x", W/{tag}', tag) and etag_matches("*", tag)
    assert not etag_matches(None, tag) and not etag_matches('"other"', tag)
    assert etag("hello") != etag("hello!")


async def _trusted(client: Any, acme: Any, statement: str, kind: str = "fact", **extra: Any) -> str:
    r = await client.post(
        "/v1/projects/acme/entries", json={"kind": kind, "statement": statement, **extra}, headers=bearer(acme.writer)
    )
    entry_id = r.json()["id"]
    assert (await client.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=bearer(acme.owner))).status_code == 200
    return entry_id


async def _use(client: Any, acme: Any, query: str, entry_id: str, times: int, token: str | None = None) -> None:
    for _ in range(times):
        who = bearer(token or acme.writer)
        recall = (await client.get(f"/v1/projects/acme/recall?q={query}&limit=50", headers=who)).json()
        assert entry_id in [e["id"] for e in recall["entries"]]
        r = await client.post(
            "/v1/projects/acme/recall_used", json={"recall_id": recall["recall_id"], "entry_id": entry_id}, headers=who
        )
        assert r.status_code == 204


async def _settings(client: Any, acme: Any, **values: Any) -> None:
    r = await client.patch("/v1/projects/acme/settings", json=values, headers=bearer(acme.owner))
    assert r.status_code == 200, r.text


async def test_the_section_appears_at_the_threshold(client: Any, acme: Any) -> None:
    await _settings(client, acme, playbook_min_trusted=3)
    await client.put("/v1/projects/acme/playbook", content="# Our playbook\n", headers=bearer(acme.owner))
    for i in range(2):
        await _trusted(client, acme, f"Trusted fact number {i} about the build")
    body = (await client.get(URL, headers=bearer(acme.reader))).text
    assert body == "# Our playbook\n"
    await _trusted(client, acme, "Trusted fact number 2 about the build")
    r = await client.get(URL, headers=bearer(acme.reader))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    assert r.text.startswith("# Our playbook\n") and SECTION_HEADING in r.text
    assert r.text.count("- Trusted fact number") == 3


async def test_only_trusted_unexpired_entries_are_listed(client: Any, acme: Any, hub: Any) -> None:
    await _settings(client, acme, playbook_min_trusted=2)
    await _trusted(client, acme, "Durable trusted convention one", kind="convention")
    await _trusted(client, acme, "Durable trusted convention two", kind="convention")
    await _trusted(client, acme, "Short lived trusted fact three", ttl_days=1)
    await client.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": "A mere candidate"}, headers=bearer(acme.writer))
    refuted = await _trusted(client, acme, "Trusted then refuted fact")
    await client.post(f"/v1/projects/acme/entries/{refuted}/refute", json={"reason": "wrong"}, headers=bearer(acme.owner))
    text = (await client.get(URL, headers=bearer(acme.writer))).text
    assert "Short lived trusted fact three" in text
    assert "A mere candidate" not in text and "Trusted then refuted" not in text
    hub.clock.advance(2 * DAY)  # expired from this instant, swept or not
    text = (await client.get(URL, headers=bearer(acme.writer))).text
    assert "Short lived" not in text and "Durable trusted convention one" in text
    await _settings(client, acme, playbook_min_trusted=3)  # two trusted unexpired left: below the threshold
    assert SECTION_HEADING not in (await client.get(URL, headers=bearer(acme.writer))).text


async def test_top_n_by_use_grouped_by_kind(client: Any, acme: Any) -> None:
    await _settings(client, acme, playbook_min_trusted=1, playbook_top_n=3)
    low = await _trusted(client, acme, "Zebra crossings need a pitfall note", kind="pitfall")
    high = await _trusted(client, acme, "Giraffe deployments use blue green", kind="convention")
    mid = await _trusted(client, acme, "Elephant tests run nightly", kind="fact")
    unused = await _trusted(client, acme, "Walrus builds are slow", kind="fact")
    # "Used" counts principals (once a day each), so three readers outrank two.
    for token in (acme.writer, acme.other_writer, acme.reader):
        await _use(client, acme, "giraffe", high, 1, token)
    for token in (acme.writer, acme.reader):
        await _use(client, acme, "elephant", mid, 1, token)
    await _use(client, acme, "zebra", low, 1)
    text = (await client.get(URL, headers=bearer(acme.writer))).text
    assert unused not in text  # top 3 only
    assert text.index(high) < text.index(mid) < text.index(low)
    assert text.index("### Conventions") < text.index("### Facts") < text.index("### Pitfalls")


async def test_etag_and_conditional_requests(client: Any, acme: Any) -> None:
    await _settings(client, acme, playbook_min_trusted=1)
    first = await client.get(URL, headers=bearer(acme.reader))
    tag = first.headers["etag"]
    again = await client.get(URL, headers={**bearer(acme.reader), "If-None-Match": tag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    await _trusted(client, acme, "A new trusted entry changes the document")
    changed = await client.get(URL, headers={**bearer(acme.reader), "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    await client.put("/v1/projects/acme/playbook", content="# Edited\n", headers=bearer(acme.owner))
    edited = await client.get(URL, headers={**bearer(acme.reader), "If-None-Match": changed.headers["etag"]})
    assert edited.status_code == 200 and edited.text.startswith("# Edited\n")


async def test_who_may_read_it(client: Any, acme: Any, hub: Any) -> None:
    from tests.conftest import make_project

    other = await make_project(hub, "other")
    for token in (acme.reader, acme.writer, acme.owner):
        assert (await client.get(URL, headers=bearer(token))).status_code == 200
    r = await client.get(URL)
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_credential"
    assert (await client.get(URL, headers=bearer("rr_not-a-token"))).status_code == 401
    r = await client.get(URL, headers=bearer(other.reader))
    assert r.status_code == 404 and r.json()["error"]["code"] == "project_not_found"
    assert (await client.get("/projects/nope/RELAYROOM.md", headers=bearer(acme.reader))).status_code == 404


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_the_owner_session_may_read_it(client: Any, acme: Any, backend: str) -> None:
    from tests.support.dashboard_helpers import login

    await login(client, acme.owner)
    r = await client.get(URL)
    assert r.status_code == 200 and r.text.startswith("# RELAYROOM.md")
