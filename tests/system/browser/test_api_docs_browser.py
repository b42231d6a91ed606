"""/docs in a real headless Chromium: reached from the dashboard's top bar,
drawn under the dashboard's policy with no violation, its links land."""

from __future__ import annotations

from typing import Any

import pytest

from tests.system.browser.test_dashboard_browser import backend, browser, page  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def test_the_api_reference_is_one_click_from_the_dashboard(live_server: Any, page: Any) -> None:  # noqa: F811
    page.goto(f"{live_server.url}/login")
    page.get_by_role("link", name="API reference").click()
    page.wait_for_url(f"{live_server.url}/docs")
    assert page.get_by_role("heading", level=1).inner_text().startswith("RelayRoom Knowledge Gateway API")
    page.locator("nav.api-toc a[href='#get-v1-projects-project-recall']").click()
    recall = page.locator("#get-v1-projects-project-recall")
    assert recall.is_visible() and "Recall trusted, unexpired entries" in recall.inner_text()
    recall.locator("summary").first.click()  # the answer's fields open without a script
    assert recall.get_by_text("entries[].statement").is_visible()
    stylesheet_rules = page.evaluate("() => [...document.styleSheets].map(s => s.cssRules.length)")
    assert len(stylesheet_rules) == 2 and all(n > 0 for n in stylesheet_rules)  # both sheets loaded, none blocked
    assert page.csp_violations == []  # type: ignore[attr-defined]
