"""The Knowledge tab stays fast at 100k entries: keyset pages, filters, search.

Bounded: one project of 100,000 entries written in one transaction, then a
handful of page loads, each timed.  SQLite only (the pages' queries are the
same on PostgreSQL; the suite's PostgreSQL run covers their correctness).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from gateway.knowledge import trust
from gateway.core.ids import new_id
from tests.support.dashboard_helpers import HTML, login

ENTRIES = 100_000
BUDGET_SECONDS = 1.0  # per page, generous for a loaded 2-core CI machine

pytestmark = pytest.mark.slow


@pytest.fixture
def backend() -> str:
    return "sqlite"


async def _fill(hub: Any, project_id: int) -> None:
    now = hub.clock.now()
    states = ("candidate", "trusted", "contradicted", "retired")
    rows = []
    for i in range(ENTRIES):
        statement = f"Entry {i:06d} about subsystem {i % 97} and the {('pooler', 'cache', 'queue')[i % 3]}"
        rows.append(
            (new_id("kn"), project_id, trust.KINDS[i % 4], statement, trust.normalise_statement(statement),
             states[i % 4], now - (ENTRIES - i), "agent-7", "learn")
        )

    async def unit(q: Any) -> None:
        await q.tx.run_many(
            "INSERT INTO entries (id, project_id, kind, statement, norm_statement, state, created_at, created_by, created_via) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    await hub.driver.write(unit)


async def test_pages_stay_fast_at_100k_entries(client: Any, acme: Any, hub: Any) -> None:
    project = await hub.accounts.project("acme")
    await _fill(hub, project.id)
    await login(client, acme.owner)
    timings: dict[str, float] = {}

    async def load(name: str, url: str) -> str:
        started = time.perf_counter()
        r = await client.get(url, headers=HTML)
        elapsed = time.perf_counter() - started
        timings[name] = max(timings.get(name, 0.0), elapsed)  # the slowest load of that name
        assert r.status_code == 200, r.text[:500]
        return r.text

    first = await load("first page", "/projects/acme/knowledge")
    ids = re.findall(r'data-entry-id="([^"]+)"', first)
    assert len(ids) == 20 + 50  # the review queue's newest candidates, then a page of the others
    assert "Review all 25000 candidates" in first
    # walk 20 pages deep by the cursors the pages hand out
    url = "/projects/acme/knowledge"
    text = first
    for _ in range(20):
        link = re.search(r'rel="next" href="\?([^"]+)"', text)
        assert link is not None
        url = "/projects/acme/knowledge?" + link.group(1).replace("&amp;", "&")
        text = await load("pages 2 to 21", url)
    await load("state filter", "/projects/acme/knowledge?state=contradicted")
    await load("kind filter", "/projects/acme/knowledge?kind=decision&state=trusted")
    found = await load("search, common word", "/projects/acme/knowledge?q=pooler")
    assert len(re.findall(r'<li class="entry', found)) == 50
    rare = await load("search, one hit", "/projects/acme/knowledge?q=entry+000007+about")
    assert len(re.findall(r'<li class="entry', rare)) == 1
    await load("audit page", "/projects/acme/audit")
    print("\n" + "\n".join(f"  {name:<22} {seconds * 1000:7.1f} ms" for name, seconds in timings.items()))
    slow = {name: s for name, s in timings.items() if s > BUDGET_SECONDS}
    assert not slow, slow
