"""The Checks page as the owner reviews a published check map: where the map
in force came from, the pending change beside it binding by binding, and
Approve and Reject in CSRF-protected forms; each supported entry's
statement beside its id; an entry's page offers the map line for it."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from gateway.hub import Hub
from tests.conftest import ProjectTokens
from tests.http.test_checkmap_publish import Repo, sha
from tests.http.test_checkmap_publish import repo  # noqa: F401 (fixture)
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.support.dashboard_helpers import HTML, csrf_from, login
from tests.support.helpers import snapshot


def text_of(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


async def test_the_checks_page_says_where_the_map_came_from_and_shows_the_pending_change(
        repo: Repo, client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub) -> None:  # noqa: F811
    await login(client, acme.owner)
    page = (await client.get("/projects/acme/checks", headers=HTML)).text
    assert 'data-checkmap-source="file"' in page
    assert "a file of the gateway's check map folder" in text_of(page)
    assert "Migrations run in staging first." in text_of(page), "the supported entry's statement beside its id"

    checks = repo.text(checks={"migrations": [repo.entries["migrations"]], "lint": [repo.entries["lint"]]})
    assert (await repo.publish(checks)).json()["status"] == "applied"
    page = (await client.get("/projects/acme/checks", headers=HTML)).text
    shown = text_of(page)
    assert 'data-checkmap-source="published"' in page
    assert "as the repository published it, from acme/api@1f3e8a7c2b9d on refs/heads/main" in shown
    assert f'href="{repo.github.url}/acme/api/actions/runs/8812345678/attempts/1"' in page

    wider = repo.text(github_refs="[refs/heads/main, refs/heads/release]", checks={"lint": [repo.entries["lint"]]})
    assert (await repo.publish(wider)).status_code == 202
    page = (await client.get("/projects/acme/checks", headers=HTML)).text
    shown = text_of(page)
    assert f'data-pending-sha256="{sha(wider)}"' in page
    assert "A published map waits for you" in shown
    github = re.search(r'<table class="table binding-diff" data-change="changed">.*?</table>', page, re.S)
    assert github is not None, "the GitHub binding, changed"
    row = text_of(re.search(r'<tr class="changed">.*?</tr>', github.group(0), re.S).group(0))  # type: ignore[union-attr]
    assert row == "Refs that vote refs/heads/main refs/heads/main, refs/heads/release"
    assert 'data-change="same"' in page, "the GitLab binding, unchanged, side by side too"
    assert "migrations : removed" in shown

    # Approve without the CSRF field: refused, nothing changes.
    before = await snapshot(hub)
    r = await client.post(f"/projects/acme/checkmap/pending/{sha(wider)}/approve", data={}, headers=HTML)
    assert r.status_code == 403 and await snapshot(hub) == before
    form = re.search(r'<form method="post" action="(/projects/acme/checkmap/pending/[0-9a-f]+/approve)"', page)
    assert form is not None
    r = await client.post(form.group(1), data={"csrf_token": csrf_from(page)}, headers=HTML)
    assert r.status_code == 303 and "notice=checkmap_approved" in r.headers["location"]
    assert repo.in_force() == sha(wider)
    page = (await client.get(r.headers["location"], headers=HTML)).text
    assert "Approved: the published check map is in force" in text_of(page) and "data-pending-sha256" not in page


async def test_the_owner_rejects_from_the_page_and_the_ledger_says_so(
        repo: Repo, client: httpx.AsyncClient, acme: ProjectTokens) -> None:  # noqa: F811
    await login(client, acme.owner)
    wider = repo.text(github_refs='["*"]')
    await repo.publish(wider)
    page = (await client.get("/projects/acme/checks", headers=HTML)).text
    r = await client.post(f"/projects/acme/checkmap/pending/{sha(wider)}/reject",
                          data={"csrf_token": csrf_from(page), "reason": "any branch is too wide"}, headers=HTML)
    assert r.status_code == 303 and "checkmap_rejected" in r.headers["location"]
    audit = text_of((await client.get("/projects/acme/audit?action=checkmap", headers=HTML)).text)
    assert "Rejected the check map checkmaps/acme.yaml from acme/api@1f3e8a7c2b9d: any branch is too wide." in audit
    assert "Published the check map checkmaps/acme.yaml from acme/api@1f3e8a7c2b9d; it changes who may vote" in audit
    # A stale form (the map is no longer pending) answers 409, on a page.
    r = await client.post(f"/projects/acme/checkmap/pending/{sha(wider)}/approve", data={"csrf_token": csrf_from(page)},
                          headers=HTML)
    assert r.status_code == 409 and "no check map with sha256" in html.unescape(r.text)


async def test_an_entrys_page_offers_its_map_line(repo: Repo, client: httpx.AsyncClient, acme: ProjectTokens) -> None:  # noqa: F811
    await login(client, acme.owner)
    page = text_of((await client.get(f"/projects/acme/entries/{repo.entries['lint']}", headers=HTML)).text)
    assert f"check-name: {{supports: [{repo.entries['lint']}]}}" in page
    mapped = text_of((await client.get(f"/projects/acme/entries/{repo.entries['migrations']}", headers=HTML)).text)
    assert f"migrations: {{supports: [{repo.entries['migrations']}]}}" in mapped
