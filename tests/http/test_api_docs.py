"""/docs: the API reference a person reads, drawn from /openapi.json, under
the dashboard's security headers, with nothing loaded from elsewhere."""

from __future__ import annotations

from collections import Counter
from html.parser import HTMLParser

import httpx

from gateway.knowledge.inputs import MAX_STATEMENT
from gateway.web.html import SECURITY_HEADERS
from gateway.web.openapi_spec import spec
from tests.conftest import ProjectTokens
from tests.support.dashboard_helpers import login


class Page(HTMLParser):
    """What a browser would fetch or run from the page, and its anchors."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched: list[str] = []
        self.inline_scripts = 0
        self.inline_styles = 0
        self.ids: list[str] = []
        self.fragments: list[str] = []
        self.operations: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            if a.get("src"):
                self.fetched.append(a["src"] or "")
            else:
                self.inline_scripts += 1
        if tag == "style" or "style" in a or any(name.startswith("on") for name in a):
            self.inline_styles += 1
        if tag == "link" and a.get("href"):
            self.fetched.append(a["href"] or "")
        if tag in ("img", "iframe", "source") and a.get("src"):
            self.fetched.append(a["src"] or "")
        if a.get("id"):
            self.ids.append(a["id"] or "")
        if tag == "a" and (a.get("href") or "").startswith("#"):
            self.fragments.append((a["href"] or "")[1:])
        if a.get("data-operation"):
            self.operations.append(a["data-operation"] or "")


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


async def test_docs_describes_every_operation_of_the_openapi_document(client: httpx.AsyncClient) -> None:
    r = await client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    for header, value in SECURITY_HEADERS.items():
        assert r.headers[header] == value, header
    page = parse(r.text)
    documented = [f"{method.upper()} {path}" for path, methods in spec()["paths"].items() for method in methods]
    assert sorted(page.operations) == sorted(documented) and len(documented) > 20
    assert [i for i, n in Counter(page.ids).items() if n > 1] == []
    assert set(page.fragments) <= set(page.ids), "every table-of-contents link has its target"


async def test_docs_loads_nothing_from_elsewhere_and_runs_no_inline_code(client: httpx.AsyncClient) -> None:
    page = parse((await client.get("/docs")).text)
    # The empty favicon (`data:,`) fetches nothing: it only spares the browser a /favicon.ico round trip.
    fetched = [url for url in page.fetched if url != "data:,"]
    assert fetched and all(url.startswith("/") and not url.startswith("//") for url in fetched), page.fetched
    assert page.inline_scripts == 0 and page.inline_styles == 0
    for url in fetched:
        assert (await client.get(url)).status_code == 200, url


async def test_docs_says_what_each_field_accepts(client: httpx.AsyncClient) -> None:
    html = (await client.get("/docs")).text
    learn = html[html.index('data-operation="POST /v1/projects/{project}/entries"'):]
    learn = learn[: learn.index("</article>")]
    for needle in ("statement", f"1 to {MAX_STATEMENT} characters", "one of fact, convention, pitfall, decision",
                   "ttl_days", "number or null", "a project token", "422"):
        assert needle in learn, needle
    recall = html[html.index('data-operation="GET /v1/projects/{project}/recall"'):]
    assert "from 1 to 50" in recall[: recall.index("</article>")]
    assert "error.code" in html and "matches ^[a-z0-9_]+$" in html
    # A body of alternatives (oneOf) reads as one table: every field once,
    # and when the one that only some alternatives need is required.
    bulk = html[html.index('data-operation="POST /v1/projects/{project}/entries/bulk"'):]
    bulk = bulk[: bulk.index("</article>")]
    for needle in ("entry_ids", "one of refute, confirm, retire", "required when action is refute", "not blank; every character visible"):
        assert needle in bulk, needle


async def test_dashboard_nav_links_to_docs_and_docs_keeps_the_session(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    assert 'href="/docs"' in (await client.get("/login")).text
    await login(client, acme.owner)
    knowledge = await client.get("/projects/acme/knowledge")
    assert knowledge.status_code == 200 and 'href="/docs"' in knowledge.text
    docs = await client.get("/docs")
    assert "Sign out" in docs.text and 'href="/docs" aria-current="page"' in docs.text
