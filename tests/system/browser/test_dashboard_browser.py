"""The dashboard end to end in a real headless Chromium against a real server.

Debian's /usr/bin/chromium, driven by Playwright's Python API (never a
downloaded browser).  Skips when chromium is missing, unless
RELAYROOM_REQUIRE_BROWSER=1 (CI), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from gateway.core.clock import DAY, to_date
from tests.conftest import live_setup

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PAYLOAD = "<script>window.__owned = 1; alert('script')</script><img src=x onerror=\"alert('img')\"> pooler note"

pytestmark = pytest.mark.slow


@pytest.fixture
def backend() -> str:
    """The browser exercises pages, not storage: one backend is enough."""
    return "sqlite"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("RELAYROOM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing and RELAYROOM_REQUIRE_BROWSER=1")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    tab.on("dialog", on_dialog)
    tab.dialogs = dialogs  # type: ignore[attr-defined]
    # Everything the pages need is allowed by their policy: no violation is logged.
    violations: list[str] = []
    tab.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    tab.csp_violations = violations  # type: ignore[attr-defined]
    try:
        yield tab
    finally:
        context.close()


async def _seed(hub: Any) -> dict[str, Any]:

    await hub.accounts.create_project("acme")
    tokens = {
        level: await hub.accounts.create_token("acme", level, name)
        for level, name in (("owner", "olivia"), ("write", "agent-7"), ("read", "reader-1"))
    }
    tokens["agent-9"] = await hub.accounts.create_token("acme", "write", "agent-9")
    owner = await hub.accounts.authenticate(tokens["owner"])
    agent7 = await hub.accounts.authenticate(tokens["write"])
    agent9 = await hub.accounts.authenticate(tokens["agent-9"])
    learn = hub.knowledge.learn
    ids = {
        "to_confirm": (await learn(agent7, "pitfall", "The pooler cannot do prepared statements."))[0].id,
        "convention": (await learn(agent7, "convention", "Tests live beside the file they test."))[0].id,
        "to_refute": (await learn(agent7, "fact", "The staging database never resets."))[0].id,
        "blocked": (await learn(agent7, "decision", "We use SQLite in production because it is one file."))[0].id,
        "payload": (await learn(agent7, "pitfall", PAYLOAD))[0].id,
    }
    await hub.knowledge.confirm(owner, ids["blocked"])
    await hub.knowledge.post_event(agent9, "error", {"contradicts": ids["blocked"], "reason": "production runs PostgreSQL"})
    ids["blocked_until"] = to_date(hub.clock.now() + 30 * DAY)
    proposal = await hub.proposals.propose(agent7, "convention", "Branch names start with the ticket id.", "seen in 40 PRs")
    ids["proposal"] = proposal.id
    recall_id, results = await hub.recall.recall(agent7, "pooler statements")
    return {"tokens": tokens, "ids": ids}


def _sign_in(page: Any, base: str, token: str) -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=token]", token)
    page.get_by_role("button", name="Sign in").click()


def _entry(page: Any, entry_id: str) -> Any:
    return page.locator(f'li.entry[data-entry-id="{entry_id}"]')


def test_an_owner_reviews_everything_in_a_real_browser(live_server: Any, page: Any) -> None:
    seeded = live_setup(live_server, _seed)
    ids, base = seeded["ids"], live_server.url

    _sign_in(page, base, seeded["tokens"]["owner"])
    page.wait_for_url(re.compile(r"/projects/acme/knowledge$"))
    assert page.locator("li.entry").count() == 5

    # filter by kind, then by a search word
    page.select_option("select[name=kind]", "convention")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"kind=convention"))
    assert page.locator("li.entry").count() == 1
    assert _entry(page, ids["convention"]).count() == 1
    page.goto(f"{base}/projects/acme/knowledge")
    page.fill("input[name=q]", "staging database")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"q=staging"))
    assert [e.get_attribute("data-entry-id") for e in page.locator("li.entry").all()] == [ids["to_refute"]]

    # confirm a candidate
    page.goto(f"{base}/projects/acme/knowledge")
    _entry(page, ids["to_confirm"]).get_by_role("button", name="Confirm").click()
    page.wait_for_url(re.compile(r"notice=confirmed"))
    assert _entry(page, ids["to_confirm"]).get_attribute("data-state") == "trusted"
    assert "Confirmed" in page.locator(".notice").inner_text()

    # a confirm that a contradiction blocks says who and until when
    _entry(page, ids["blocked"]).get_by_role("button", name="Confirm").click()
    heading = page.locator("h1")
    assert "blocked" in heading.inner_text().lower()
    body = page.locator("main").inner_text()
    assert "agent-9" in body and "production runs PostgreSQL" in body
    assert page.locator("time.blocked-until").inner_text() == ids["blocked_until"]
    page.get_by_role("link", name="← Back").click()
    page.wait_for_url(re.compile(r"/projects/acme/knowledge"))
    assert _entry(page, ids["blocked"]).get_attribute("data-state") == "contradicted"

    # refute with a reason
    target = _entry(page, ids["to_refute"])
    target.locator("input[name=reason]").fill("it resets every Sunday")
    target.get_by_role("button", name="Refute").click()
    page.wait_for_url(re.compile(r"notice=refuted"))
    assert _entry(page, ids["to_refute"]).get_attribute("data-state") == "contradicted"
    assert "it resets every Sunday" in _entry(page, ids["to_refute"]).inner_text()

    # approve a proposal: it becomes a candidate created via reflection
    page.get_by_role("link", name="Proposals").click()
    proposal = page.locator(f'li[data-proposal-id="{ids["proposal"]}"]')
    proposal.get_by_role("button", name="Approve").click()
    page.wait_for_url(re.compile(r"notice=approved"))
    page.locator(".notice a").click()
    assert page.locator("article.entry-page").get_attribute("data-state") == "candidate"
    assert "reflection" in page.locator("main").inner_text()

    # the Learning panel, with its charts
    page.get_by_role("link", name="Learning").click()
    page.wait_for_url(re.compile(r"/projects/acme/learning$"))
    assert page.locator("h1").inner_text() == "Learning"
    assert page.locator("svg.chart-svg").count() == 3
    assert page.locator('[data-figure="recalls"] .tile-number').inner_text() == "1"

    # nothing an agent wrote ever ran
    page.goto(f"{base}/projects/acme/knowledge")
    statement = _entry(page, ids["payload"]).locator(".statement")
    assert statement.inner_text() == PAYLOAD
    page.goto(f"{base}/projects/acme/entries/{ids['payload']}")
    assert page.locator(".statement").inner_text() == PAYLOAD
    assert page.evaluate("window.__owned") is None
    assert page.locator("main img").count() == 0
    assert page.dialogs == []  # type: ignore[attr-defined]
    assert page.csp_violations == []  # type: ignore[attr-defined]


def test_agent_tokens_cannot_sign_in_in_the_browser(live_server: Any, page: Any) -> None:
    seeded = live_setup(live_server, _seed)
    for token in (seeded["tokens"]["write"], seeded["tokens"]["read"]):
        _sign_in(page, live_server.url, token)
        assert "cannot sign in" in page.locator("[role=alert]").inner_text()
        assert page.url.endswith("/login")
    page.goto(f"{live_server.url}/projects/acme/knowledge")
    assert "/login" in page.url
