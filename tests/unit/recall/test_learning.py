"""The learning figures: recalls, returned, used, use rate, per day, per entry."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.clock import DAY, HOUR, to_date
from gateway.recall.learning import LEAST_USEFUL_MIN_RETURNED, rank_entries, shape_days, window_start
from gateway.store.dialect import DIALECTS
from tests.support.helpers import bearer, learn, settle


def test_window_starts_at_midnight_and_holds_whole_days() -> None:
    now = 1_800_000_000.0 + 5 * HOUR
    start = window_start(now, 7)
    assert start % DAY == 0 and start <= now and now - start < 7 * DAY and now - start >= 6 * DAY


def test_days_without_recalls_are_zeros() -> None:
    since = 1_800_000_000.0 // DAY * DAY
    first = int(since // DAY)
    days = shape_days(
        since, 3,
        [{"day": first, "recalls": 2, "returned": 5}, {"day": first + 2, "recalls": 1, "returned": 0}],
        [{"day": first, "used": 2, "recalls_with_use": 1}],
    )
    assert [(d.recalls, d.returned, d.used, d.use_rate) for d in days] == [(2, 5, 2, 0.4), (0, 0, 0, None), (1, 0, 0, None)]
    assert [d.date for d in days] == [to_date(since + i * DAY) for i in range(3)]


def test_ranking_entries() -> None:
    counts = {1: (10, 0), 2: (4, 4), 3: (2, 0), 4: (6, 3), 5: (LEAST_USEFUL_MIN_RETURNED, 1)}
    by_returned, most, least = rank_entries(counts)
    assert by_returned == [1, 4, 2, 5, 3]
    assert most == [2, 4, 5]
    assert least == [1, 5, 4, 2]  # entry 3 was returned too rarely to judge


async def _trusted(client: Any, acme: Any, statement: str) -> str:
    entry_id = (await learn(client, "acme", acme.writer, statement))["id"]
    await client.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    return entry_id


async def _recall(client: Any, token: str, query: str) -> dict[str, Any]:
    r = await client.get(f"/v1/projects/acme/recall?q={query}", headers=bearer(token))
    assert r.status_code == 200
    return r.json()


async def _used(client: Any, token: str, recall_id: str, entry_id: str) -> None:
    r = await client.post("/v1/projects/acme/recall_used", json={"recall_id": recall_id, "entry_id": entry_id}, headers=bearer(token))
    assert r.status_code == 204


async def test_figures_over_days(client: Any, acme: Any, hub: Any) -> None:
    hub.clock.set((hub.clock.now() // DAY) * DAY + 10 * HOUR)  # mid-morning, so +/- hours stay in the day
    alpha = await _trusted(client, acme, "Alpha widgets are blue")
    beta = await _trusted(client, acme, "Beta widgets are green")
    never = await _trusted(client, acme, "Gamma gadgets ship on Fridays")
    day_one = to_date(hub.clock.now())
    first = await _recall(client, acme.writer, "widgets")  # returns alpha and beta
    assert {e["id"] for e in first["entries"]} == {alpha, beta}
    await _used(client, acme.writer, first["recall_id"], alpha)
    await _used(client, acme.writer, first["recall_id"], alpha)  # counted once
    hub.clock.advance(DAY)
    second = await _recall(client, acme.reader, "alpha")
    await _used(client, acme.reader, second["recall_id"], alpha)
    await _recall(client, acme.reader, "nothing-matches-this")
    await settle(hub)
    r = await client.get("/v1/projects/acme/learning?days=7", headers=bearer(acme.owner))
    assert r.status_code == 200
    body = r.json()
    assert body["days"] == 7 and len(body["per_day"]) == 7
    assert (body["recalls"], body["entries_returned"], body["entries_used"]) == (3, 3, 2)
    assert body["use_rate"] == pytest.approx(2 / 3, abs=1e-3)
    assert body["recalls_with_use"] == 2
    by_day = {d["date"]: d for d in body["per_day"]}
    assert (by_day[day_one]["recalls"], by_day[day_one]["returned"], by_day[day_one]["used"]) == (1, 2, 1)
    assert by_day[day_one]["use_rate"] == 0.5
    assert body["per_day"][-1]["recalls"] == 2 and body["per_day"][-1]["date"] == to_date(hub.clock.now())
    per_entry = {e["entry_id"]: (e["returned"], e["used"]) for e in body["entries"]}
    assert per_entry == {alpha: (2, 2), beta: (1, 0)}
    assert [e["entry_id"] for e in body["most_useful"]] == [alpha]
    assert body["never_recalled"]["count"] == 1 and body["never_recalled"]["entries"][0]["entry_id"] == never
    # an entry's page: returned and used, ever
    assert await _history(hub, acme, alpha) == (2, 2)
    assert await _history(hub, acme, beta) == (1, 0)
    assert await _history(hub, acme, never) == (0, 0)
    # a one-day window sees only today
    today = (await client.get("/v1/projects/acme/learning?days=1", headers=bearer(acme.owner))).json()
    assert (today["recalls"], today["entries_returned"], today["entries_used"]) == (2, 1, 1)


async def _history(hub: Any, acme: Any, entry_id: str) -> tuple[int, int]:
    """(times returned, times used) as the entry's page reads them."""
    owner = await hub.accounts.authenticate(acme.owner)
    _, returned, used = await hub.ledger.entry_history(owner, await hub.knowledge.get(owner, entry_id))
    return returned, used


async def _recounted(hub: Any) -> dict[int, int]:
    """entry seq -> times returned, counted from the result rows themselves."""
    rows = await hub.driver.read(lambda q: q.tx.all("SELECT entry_seq, COUNT(*) AS n FROM recall_results GROUP BY entry_seq"))
    return {int(r["entry_seq"]): int(r["n"]) for r in rows}


async def test_times_returned_match_a_recount_of_the_results(client: Any, acme: Any, hub: Any) -> None:
    """Returned again and again, by recalls of two principals, with a recall
    that returns nothing between them: each entry's figure is the number of
    its result rows (on SQLite the kept counters, once folded, hold exactly
    that)."""
    alpha = await _trusted(client, acme, "Alpha widgets are blue")
    beta = await _trusted(client, acme, "Beta widgets are green")
    never = await _trusted(client, acme, "Gamma gadgets ship on Fridays")
    for token, query in [
        (acme.writer, "widgets"), (acme.reader, "widgets"), (acme.reader, "nothing-matches-this"),
        (acme.writer, "alpha"), (acme.reader, "widgets"), (acme.writer, "alpha"),
    ]:
        await _recall(client, token, query)
    await settle(hub)
    owner = await hub.accounts.authenticate(acme.owner)
    seqs = {entry_id: (await hub.knowledge.get(owner, entry_id)).seq for entry_id in (alpha, beta, never)}
    recount = await _recounted(hub)
    assert recount == {seqs[alpha]: 5, seqs[beta]: 3}
    for entry_id, seq in seqs.items():
        assert (await _history(hub, acme, entry_id))[0] == recount.get(seq, 0)
    if DIALECTS[hub.driver.dialect].recall_counters:
        # Not folded yet (a fold every hundred recalls): the figures above
        # added the rows since; once folded the counters alone hold them.
        await hub.driver.write(lambda q: q.fold_returned())
        rows = await hub.driver.read(lambda q: q.tx.all("SELECT entry_seq, returned FROM recall_counts"))
        assert {int(r["entry_seq"]): int(r["returned"]) for r in rows} == recount
        for entry_id, seq in seqs.items():
            assert (await _history(hub, acme, entry_id))[0] == recount.get(seq, 0)
    body = (await client.get("/v1/projects/acme/learning", headers=bearer(acme.owner))).json()
    assert [e["entry_id"] for e in body["never_recalled"]["entries"]] == [never]
    assert {e["entry_id"]: e["returned"] for e in body["entries"]} == {alpha: 5, beta: 3}


@pytest.mark.parametrize("backend", ["sqlite"])  # the store that keeps recall counters
async def test_the_figures_ever_are_read_from_the_counters(client: Any, acme: Any, hub: Any) -> None:
    """Never recalled and times returned come from `recall_counts` where
    the store keeps it, not from a count of the result rows: a counter set
    apart from its rows shows through."""
    assert DIALECTS[hub.driver.dialect].recall_counters
    alpha = await _trusted(client, acme, "Alpha widgets are blue")
    beta = await _trusted(client, acme, "Beta widgets are green")
    await _recall(client, acme.writer, "widgets")
    await settle(hub)
    owner = await hub.accounts.authenticate(acme.owner)
    alpha_seq = (await hub.knowledge.get(owner, alpha)).seq
    beta_seq = (await hub.knowledge.get(owner, beta)).seq

    async def tamper(q: Any) -> None:
        await q.fold_returned()
        await q.tx.run("UPDATE recall_counts SET returned = 41 WHERE entry_seq = ?", alpha_seq)
        await q.tx.run("DELETE FROM recall_counts WHERE entry_seq = ?", beta_seq)

    await hub.driver.write(tamper)
    assert await _history(hub, acme, alpha) == (41, 0)
    body = (await client.get("/v1/projects/acme/learning", headers=bearer(acme.owner))).json()
    assert body["never_recalled"]["count"] == 1 and body["never_recalled"]["entries"][0]["entry_id"] == beta


async def test_an_empty_project_has_no_rate(client: Any, acme: Any) -> None:
    body = (await client.get("/v1/projects/acme/learning", headers=bearer(acme.owner))).json()
    assert body["recalls"] == 0 and body["use_rate"] is None and len(body["per_day"]) == 30


async def test_projects_are_measured_apart(client: Any, acme: Any, hub: Any) -> None:
    from tests.conftest import make_project

    other = await make_project(hub, "other")
    await _trusted(client, acme, "Alpha widgets are blue")
    await _recall(client, acme.writer, "widgets")
    body = (await client.get("/v1/projects/other/learning", headers=bearer(other.owner))).json()
    assert body["recalls"] == 0


@pytest.mark.parametrize("backend", ["sqlite"])  # input checks: the store makes no difference
@pytest.mark.parametrize("who", ["reader", "writer"])
async def test_only_owners_read_the_figures(client: Any, acme: Any, who: str) -> None:
    r = await client.get("/v1/projects/acme/learning", headers=bearer(getattr(acme, who)))
    assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_level"


@pytest.mark.parametrize("backend", ["sqlite"])  # input checks: the store makes no difference
@pytest.mark.parametrize("days", ["0", "366", "x", "-1", "1.5"])
async def test_bad_windows_are_refused(client: Any, acme: Any, days: str) -> None:
    r = await client.get(f"/v1/projects/acme/learning?days={days}", headers=bearer(acme.owner))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_days"
