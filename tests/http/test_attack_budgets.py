"""Attacks on the budgets and on extraction (issue 11, findings 3 and 4).

An agent with a write (or only a read) token tries to flood the store or the
review queue, stall the process, or buy rank in RELAYROOM.md.  Each test
asserts the contract's answer and that nothing was written
(`snapshot(hub)` before == after).  Budgets are set small through
`WriteLimits` so the tests stay fast; the real clock is only used where the
point is wall time (a hostile 64 KiB message against a real server).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from gateway.knowledge import extraction
from gateway.core.clock import DAY, HOUR
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.knowledge.service import WriteLimits
from gateway.knowledge.model import Principal
from tests.conftest import LiveServer, ProjectTokens, live_setup, make_project
from tests.support.helpers import bearer, settle, snapshot

ENTRIES = "/v1/projects/acme/entries"
PROPOSALS = "/v1/projects/acme/proposals"
RECALL = "/v1/projects/acme/recall"
USED = "/v1/projects/acme/recall_used"
MD = "/projects/acme/RELAYROOM.md"


def tight(hub: Hub, *, learn: int = 600, events: int = 1200, recalls: int = 3600) -> None:
    hub.knowledge.limits = WriteLimits(learn_per_hour=learn, events_per_hour=events, recalls_per_hour=recalls)


def message(i: int, n: int) -> str:
    """A thread message stating `n` distinct pitfalls."""
    return "\n".join(f"Pitfall: message {i} statement {k} breaks the nightly build" for k in range(n))


async def post_message(client: httpx.AsyncClient, token: str, text: str, thread: str = "t-1") -> httpx.Response:
    return await client.post(
        f"/v1/projects/acme/threads/{thread}/messages", json={"author": "bob", "text": text}, headers=bearer(token)
    )


async def learn(client: httpx.AsyncClient, token: str, statement: str) -> httpx.Response:
    return await client.post(ENTRIES, json={"kind": "fact", "statement": statement}, headers=bearer(token))


async def propose(client: httpx.AsyncClient, token: str, statement: str) -> httpx.Response:
    return await client.post(
        PROPOSALS, json={"kind": "convention", "statement": statement, "rationale": "seen twice"}, headers=bearer(token)
    )


def assert_limited(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "rate_limited" and r.json()["error"]["message"]
    assert int(r.headers["retry-after"]) >= 1


async def refused_and_nothing_written(hub: Hub, attempt: Any) -> httpx.Response:
    await settle(hub)
    before = await snapshot(hub)
    r = await attempt()
    assert_limited(r)
    await settle(hub)
    assert await snapshot(hub) == before
    return r


# -- one candidate budget, every path -------------------------------------------


async def test_learn_at_budget_then_a_thread_message_with_statements_writes_nothing(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub
) -> None:
    tight(hub, learn=3)
    for i in range(3):
        assert (await learn(client, acme.writer, f"Budgeted fact number {i} here")).status_code == 201
    assert_limited(await learn(client, acme.writer, "One learn too many for the hour"))
    # The door the issue found open: the same principal, another path.
    await refused_and_nothing_written(hub, lambda: post_message(client, acme.writer, message(1, 5)))
    # A decision sentence (not a label) is refused the same way.
    await refused_and_nothing_written(
        hub, lambda: post_message(client, acme.writer, "We decided to pin the pooler because prepared statements fail.")
    )


async def test_a_principal_at_the_budget_is_refused_before_extraction_runs(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    tight(hub, learn=2)
    assert (await post_message(client, acme.writer, message(1, 2))).status_code == 201

    def never(text: str) -> list[Any]:
        raise AssertionError("extraction ran for a principal at its budget")

    monkeypatch.setattr("gateway.knowledge.threads.extract", never)
    await refused_and_nothing_written(hub, lambda: post_message(client, acme.writer, "we chose " * 3000))
    # Plain chatter too: at the budget, the message is refused whole.
    await refused_and_nothing_written(hub, lambda: post_message(client, acme.writer, "just saying hello"))


async def test_a_message_that_would_exceed_the_remaining_budget_is_refused_whole(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub
) -> None:
    tight(hub, learn=5)
    assert (await learn(client, acme.writer, "One fact learned before the thread")).status_code == 201
    assert (await propose(client, acme.writer, "One proposal made before the thread")).status_code == 201
    # Three candidates left: a message of four, of twenty, of four in a
    # numbered list, each refused with nothing (no message row, no entry).
    for text in (message(2, 4), message(3, 20), "\n".join(f"{k}. Rule: step {k} of the release needs a tag" for k in range(1, 5))):
        r = await refused_and_nothing_written(hub, lambda text=text: post_message(client, acme.writer, text))
        assert "left" in r.json()["error"]["message"]
    ok = await post_message(client, acme.writer, message(4, 3))
    assert ok.status_code == 201 and len(ok.json()["candidates"]) == 3
    await refused_and_nothing_written(hub, lambda: post_message(client, acme.writer, message(5, 1)))


async def test_repeats_do_not_spend_the_budget(client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub) -> None:
    tight(hub, learn=3)
    first = await post_message(client, acme.writer, message(1, 2))
    assert first.status_code == 201 and len(first.json()["candidates"]) == 2
    # One slot left: the two repeated statements are duplicates, one is new.
    again = await post_message(client, acme.writer, message(1, 2) + "\nFact: a third statement is new to the store")
    assert again.status_code == 201
    assert len(again.json()["candidates"]) == 1 and len(again.json()["duplicates"]) == 2


async def test_proposals_at_budget(client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub) -> None:
    tight(hub, learn=2)
    for i in range(2):
        assert (await propose(client, acme.writer, f"Proposal number {i} for the queue")).status_code == 201
    await refused_and_nothing_written(hub, lambda: propose(client, acme.writer, "A third proposal in the hour"))
    await refused_and_nothing_written(hub, lambda: learn(client, acme.writer, "A learn after two proposals"))
    await refused_and_nothing_written(hub, lambda: post_message(client, acme.writer, message(9, 1)))
    # Another principal has its own budget.
    assert (await propose(client, acme.other_writer, "Someone else's proposal is fine")).status_code == 201
    # The owner approving one makes a reflection candidate: not a second spend.
    listed = (await client.get(PROPOSALS, headers=bearer(acme.owner))).json()
    pending = [p for p in listed["proposals"] if p["proposed_by"] == "agent-7"]
    approved = await client.post(f"{PROPOSALS}/{pending[0]['id']}/approve", headers=bearer(acme.owner))
    assert approved.status_code == 201
    hub.clock.advance(HOUR + 1)
    for i in range(2):
        assert (await learn(client, acme.writer, f"Fresh hour fact number {i}")).status_code == 201
    await refused_and_nothing_written(hub, lambda: propose(client, acme.writer, "Over again in the new hour"))


async def test_mixed_paths_sum_to_one_budget_and_a_second_principal_is_unaffected(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub
) -> None:
    tight(hub, learn=4)
    assert (await learn(client, acme.writer, "Mixed path fact from learn")).status_code == 201
    assert (await propose(client, acme.writer, "Mixed path proposal from reflection")).status_code == 201
    assert (await post_message(client, acme.writer, message(1, 2))).status_code == 201  # 4 of 4
    for attempt in (
        lambda: learn(client, acme.writer, "Mixed path one too many"),
        lambda: propose(client, acme.writer, "Mixed path proposal too many"),
        lambda: post_message(client, acme.writer, message(2, 1)),
    ):
        await refused_and_nothing_written(hub, attempt)
    assert (await learn(client, acme.other_writer, "The other agent learns freely")).status_code == 201
    assert (await post_message(client, acme.other_writer, message(3, 3))).status_code == 201
    hub.clock.advance(HOUR + 1)
    assert (await post_message(client, acme.writer, message(4, 4))).status_code == 201


async def test_budgets_are_counted_from_the_store_so_a_second_process_sees_them(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub, config: Config, clock: Any
) -> None:
    tight(hub, learn=2, recalls=2)
    second = Hub(config, clock=clock)  # another gateway process on the same database
    await second.start(background=False)
    try:
        tight(second, learn=2, recalls=2)
        writer = await second.accounts.authenticate(acme.writer)
        reader = await second.accounts.authenticate(acme.reader)
        assert (await learn(client, acme.writer, "Fact learned through process one")).status_code == 201
        await second.knowledge.learn(writer, "fact", "Fact learned through process two")
        await refused_and_nothing_written(hub, lambda: learn(client, acme.writer, "A third fact through process one"))
        await second.recall.recall(reader, "anything")
        assert (await client.get(f"{RECALL}?q=anything", headers=bearer(acme.reader))).status_code == 200
        await refused_and_nothing_written(hub, lambda: client.get(f"{RECALL}?q=anything", headers=bearer(acme.reader)))
    finally:
        await second.stop()


# -- the read budget -----------------------------------------------------------


async def trusted_entry(hub: Hub, statement: str) -> str:
    project = await hub.accounts.project("acme")
    owner = Principal(project=project, name="olivia", level="owner")
    entry, _ = await hub.knowledge.learn(owner, "convention", statement)
    await hub.knowledge.confirm(owner, entry.id)
    return entry.id


async def recall(client: httpx.AsyncClient, token: str, q: str = "deploy") -> httpx.Response:
    return await client.get(f"{RECALL}?q={q}", headers=bearer(token))


async def test_recall_and_recall_used_share_the_read_budget(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub
) -> None:
    entry_id = await trusted_entry(hub, "Deploy with the blue green script only")
    tight(hub, recalls=3)
    first = (await recall(client, acme.reader)).json()
    assert first["entries"][0]["id"] == entry_id
    assert (await client.post(USED, json={"recall_id": first["recall_id"], "entry_id": entry_id}, headers=bearer(acme.reader))).status_code == 204
    second = (await recall(client, acme.reader)).json()  # 3 of 3
    # Over: a recall (no recall row, no results), a use (no use row), a
    # recall with another query and kind.
    await refused_and_nothing_written(hub, lambda: recall(client, acme.reader))
    await refused_and_nothing_written(
        hub, lambda: client.post(USED, json={"recall_id": second["recall_id"], "entry_id": entry_id}, headers=bearer(acme.reader))
    )
    await refused_and_nothing_written(hub, lambda: client.get(f"{RECALL}?q=blue&kind=convention&limit=50", headers=bearer(acme.reader)))
    # Refused before any lookup: an unknown recall id answers 429, not 404.
    await refused_and_nothing_written(
        hub, lambda: client.post(USED, json={"recall_id": "rc_nope", "entry_id": entry_id}, headers=bearer(acme.reader))
    )
    # Other principals read on; the budget comes back after the hour.
    assert (await recall(client, acme.writer)).status_code == 200
    hub.clock.advance(HOUR + 1)
    assert (await recall(client, acme.reader)).status_code == 200


async def test_a_busy_reader_is_counted_from_its_last_minute_and_refused_at_the_budget_all_the_same(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read budget of a recall is counted over the whole hour once a
    minute per principal; in between, over the rows since that count (their
    sum bounds the hour's): on SQLite the recalls above the last id seen,
    on PostgreSQL the reads of the last 21-41 s.  Spread over minutes and
    past the edge of the hour, the budget still refuses its first recall
    over the limit, and comes back when the hour has passed."""
    from gateway.store.queries import Queries

    tight(hub, recalls=6)
    reader = (await hub.accounts.authenticate(acme.reader)).name
    windows: list[float] = []
    after: list[int] = []
    count, count_after = Queries.count_reads_since, Queries.count_reads_after

    async def counted(self: Queries, project_id: int, principal: str, since: float, *, lock: bool = False) -> Any:
        if principal == reader:
            windows.append(hub.clock.now() - since)
        return await count(self, project_id, principal, since, lock=lock)

    async def counted_after(self: Queries, project_id: int, principal: str, *args: Any) -> Any:
        found = await count_after(self, project_id, principal, *args)
        if principal == reader:
            after.append(found[0])
        return found

    monkeypatch.setattr(Queries, "count_reads_since", counted)
    monkeypatch.setattr(Queries, "count_reads_after", counted_after)
    for step in range(5):
        assert (await recall(client, acme.reader)).status_code == 200
        await settle(hub)  # its record committed, as it is a moment after the answer
        # Another principal's recalls between the reader's are not the reader's.
        assert (await recall(client, acme.writer)).status_code == 200
        await settle(hub)
        hub.clock.advance(20)
    # One exact count of the hour per minute; in between, the rows since.
    if hub.driver.dialect == "sqlite":
        assert [round(w) for w in windows] == [HOUR, HOUR]
        assert after == [1, 1, 1]  # each time, the one recall it made since its last check
    else:
        assert [round(w) for w in windows] == [HOUR, 21, 41, HOUR, 21]
    assert (await recall(client, acme.reader)).status_code == 200  # the sixth, at 100 s
    await settle(hub)
    windows.clear()
    hub.clock.advance(1)
    await refused_and_nothing_written(hub, lambda: recall(client, acme.reader))
    assert windows[-1] == HOUR  # at the edge the hour is counted exactly
    hub.clock.advance(HOUR - 100)  # the first recall of the hour has left it
    assert (await recall(client, acme.reader)).status_code == 200
    await settle(hub)
    await refused_and_nothing_written(hub, lambda: recall(client, acme.reader))


async def test_recalls_another_process_records_between_two_checks_are_counted(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub, config: Config, clock: Any
) -> None:
    """Between two exact counts a check adds up what came since, whichever
    process recorded it: a second process's recalls of the same agent are
    spent from the same budget, and another agent's are not."""
    tight(hub, recalls=5)
    second = Hub(config, clock=clock)
    await second.start(background=False)
    try:
        tight(second, recalls=5)
        reader = await second.accounts.authenticate(acme.reader)
        writer = await second.accounts.authenticate(acme.writer)
        assert (await recall(client, acme.reader)).status_code == 200  # 1, counted exactly here
        await settle(hub)
        for _ in range(3):
            hub.clock.advance(10)  # within the minute of that count, past the second of its window
            await second.recall.recall(reader, "deploy")  # 2-4, on the other process
            await second.recall.recall(writer, "deploy")  # not the reader's
        await settle(second)
        hub.clock.advance(10)
        assert (await recall(client, acme.reader)).status_code == 200  # 5 of 5
        await settle(hub)
        await refused_and_nothing_written(hub, lambda: recall(client, acme.reader))
    finally:
        await second.stop()


async def test_a_repeated_use_writes_nothing_and_the_budget_holds_across_many_recalls(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub
) -> None:
    entry_id = await trusted_entry(hub, "Deploy logs rotate at midnight UTC")
    tight(hub, recalls=4)
    made = [(await recall(client, acme.reader)).json()["recall_id"] for _ in range(2)]
    assert (await client.post(USED, json={"recall_id": made[0], "entry_id": entry_id}, headers=bearer(acme.reader))).status_code == 204
    await settle(hub)
    before = await snapshot(hub)
    # The same pair again: answered, nothing stored, nothing spent.
    assert (await client.post(USED, json={"recall_id": made[0], "entry_id": entry_id}, headers=bearer(acme.reader))).status_code == 204
    assert await snapshot(hub) == before
    assert (await client.post(USED, json={"recall_id": made[1], "entry_id": entry_id}, headers=bearer(acme.reader))).status_code == 204
    await refused_and_nothing_written(hub, lambda: recall(client, acme.reader))


def test_the_read_budget_is_a_setting_with_a_floor() -> None:
    assert Config.from_env({"RELAYROOM_RECALLS_PER_HOUR": "7"}).recalls_per_hour == 7
    assert Config.from_env({}).recalls_per_hour == 3600
    for bad in ("0", "-1", "lots"):
        with pytest.raises(ValueError, match="RELAYROOM_RECALLS_PER_HOUR"):
            Config.from_env({"RELAYROOM_RECALLS_PER_HOUR": bad})
    hub = Hub(Config(database_url="sqlite:///:memory:", recalls_per_hour=9, learn_per_hour=8, events_per_hour=7))
    assert hub.knowledge.limits == WriteLimits(learn_per_hour=8, events_per_hour=7, recalls_per_hour=9)
    assert hub.recall.limits() is hub.knowledge.limits


# -- the MCP door ---------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_mcp_learn_recall_and_recall_used_at_budget(live_server: LiveServer, backend: str) -> None:
    from tests.http.test_mcp import call, call_error, mcp_client

    async def setup(hub: Hub) -> tuple[ProjectTokens, str]:
        tokens = await make_project(hub, "acme")
        entry_id = await trusted_entry(hub, "Deploy only from the release branch")
        tight(hub, learn=1, recalls=2)
        return tokens, entry_id

    acme, entry_id = live_setup(live_server, setup)

    def rows() -> dict[str, int]:
        async def read(hub: Hub) -> dict[str, int]:
            await settle(hub)
            return await snapshot(hub)

        return live_setup(live_server, read)

    async with mcp_client(live_server, acme.writer) as writer:
        await call(writer, "learn", kind="fact", statement="One fact through the MCP door")
        before = rows()
        for statement in ("A second fact through MCP", "Third, a pitfall through MCP"):
            text = await call_error(writer, "learn", kind="pitfall", statement=statement)
            assert "rate_limited: agent-7 has reached 1 candidates per hour" in text and "retry in" in text
        assert rows() == before
    async with mcp_client(live_server, acme.reader) as reader:
        answer = await call(reader, "recall", query="deploy")
        await call(reader, "recall_used", recall_id=answer["recall_id"], entry_id=entry_id)  # 2 of 2
        before = rows()
        assert "rate_limited: reader-1 has reached 2 recalls" in await call_error(reader, "recall", query="deploy")
        assert "rate_limited:" in await call_error(reader, "recall", query="release branch", limit=50)
        again = await call_error(reader, "recall_used", recall_id=answer["recall_id"], entry_id=entry_id)
        assert "rate_limited:" in again
        assert rows() == before


# -- "most used" counts a principal once per entry per day ---------------------------


async def uses_in_playbook(hub: Hub) -> dict[str, int]:
    project = await hub.accounts.project("acme")
    now = hub.clock.now()
    top = await hub.driver.read(lambda q: q.most_used_trusted(project.id, now, 50))
    return {entry.id: uses for entry, uses in top}


async def use(client: httpx.AsyncClient, token: str, query: str, entry_id: str) -> None:
    made = (await recall(client, token, query)).json()
    assert entry_id in [e["id"] for e in made["entries"]]
    r = await client.post(USED, json={"recall_id": made["recall_id"], "entry_id": entry_id}, headers=bearer(token))
    assert r.status_code == 204


async def test_one_principal_repeating_itself_counts_once_a_day(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub
) -> None:
    loud = await trusted_entry(hub, "Giraffe builds need the big runner")
    for _ in range(6):  # six recalls, six distinct (recall, entry) pairs, one reader
        await use(client, acme.reader, "giraffe", loud)
    assert (await uses_in_playbook(hub))[loud] == 1
    hub.clock.advance(DAY)
    await use(client, acme.reader, "giraffe", loud)
    await use(client, acme.reader, "giraffe", loud)
    assert (await uses_in_playbook(hub))[loud] == 2
    # The Learning panel still counts every reported pair: it measures recall.
    report = (await client.get("/v1/projects/acme/learning", headers=bearer(acme.owner))).json()
    assert report["entries_used"] == 8


async def test_two_principals_reorder_nothing_more_than_two_votes(
    client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub
) -> None:
    r = await client.patch("/v1/projects/acme/settings", json={"playbook_min_trusted": 1}, headers=bearer(acme.owner))
    assert r.status_code == 200
    first = await trusted_entry(hub, "Zebra migrations run before deploys")
    second = await trusted_entry(hub, "Okapi caches are flushed on release")
    third = await trusted_entry(hub, "Quokka tests are quarantined weekly")
    text = (await client.get(MD, headers=bearer(acme.reader))).text
    assert text.index(first) < text.index(second) < text.index(third)  # no uses: oldest first
    # One reader hammers the newest entry; two principals use the middle one once.
    for _ in range(5):
        await use(client, acme.reader, "quokka", third)
    for token in (acme.reader, acme.writer):
        await use(client, token, "okapi", second)
    text = (await client.get(MD, headers=bearer(acme.reader))).text
    assert text.index(second) < text.index(first) and text.index(second) < text.index(third)
    assert text.index(third) < text.index(first)  # one vote for the hammered one, as for one use
    assert await uses_in_playbook(hub) == {second: 2, third: 1, first: 0}


# -- extraction that cannot stall the process --------------------------------------

BODY_BUDGET = 65000  # bytes of JSON, under the 64 KiB body limit


def fill(unit: str, *, tail: str = "") -> str:
    """`unit` repeated to just under the body limit once JSON-encoded (UTF-8)."""
    size = len(json.dumps(unit, ensure_ascii=False).encode()) - 2
    return unit * ((BODY_BUDGET - 60 - len(tail)) // size) + tail


HOSTILE = {
    "we_chose": fill("we chose "),
    "decided_without_because": fill("We decided "),
    "alternating_keywords": fill("we chose because we decided we agreed because "),
    "nested_heads": fill("we have decided we settled on we chose "),
    "one_huge_sentence": "We settled on " + fill("x ", tail="because it works"),
    "many_tiny_sentences": fill("We chose it because so. "),
    "many_tiny_decisions": fill("We chose plan A because the tests pass! "),
    "unicode_whitespace": fill("we\u2003chose\u00a0\u2009"),
    "label_then_spaces": "Pitfall" + fill(" "),
    "many_lines": fill("we chose x\n"),
    "spaces_after_we": "we" + fill("\u3000") + "chose",
}


def post_timed(url: str, token: str, text: str) -> tuple[httpx.Response, float]:
    body = json.dumps({"author": "mallory", "text": text}, ensure_ascii=False).encode()
    assert len(body) <= 65536
    started = time.perf_counter()
    r = httpx.post(url, content=body, headers={**bearer(token), "content-type": "application/json"}, timeout=30)
    return r, time.perf_counter() - started


@pytest.mark.parametrize("backend", ["sqlite"])
def test_hostile_64_kib_messages_answer_within_a_second_and_healthz_stays_fast(
    live_server: LiveServer, backend: str
) -> None:
    acme = live_setup(live_server, lambda hub: make_project(hub, "acme"))
    url = f"{live_server.url}/v1/projects/acme/threads/t-hostile/messages"
    httpx.get(f"{live_server.url}/healthz")  # warm
    for shape, text in HOSTILE.items():
        slowest: list[float] = []
        done, probing = threading.Event(), threading.Event()

        def probe() -> None:
            with httpx.Client() as c:
                while not done.is_set():
                    started = time.perf_counter()
                    assert c.get(f"{live_server.url}/healthz").status_code == 200
                    slowest.append(time.perf_counter() - started)
                    probing.set()

        prober = threading.Thread(target=probe)
        prober.start()
        assert probing.wait(5)
        try:
            r, took = post_timed(url, acme.writer, text)
        finally:
            time.sleep(0.02)  # a probe or two after the answer, so one overlapped the work
            done.set()
            prober.join(10)
        assert r.status_code == 201, (shape, r.text[:200])
        assert took < 1.0, (shape, took)
        assert slowest and max(slowest) < 0.25, (shape, max(slowest))
        assert len(r.json()["candidates"]) <= extraction.MAX_STATEMENTS, shape


def _best_of(text: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        extraction.extract(text)
        times.append(time.perf_counter() - started)
    return min(times)


@pytest.mark.parametrize("unit", ["we chose ", "We decided ", "we chose because we decided ", "we\u2003chose\u00a0", "x. "])
def test_extraction_time_grows_linearly(unit: str) -> None:
    small = unit * (8192 // len(unit))
    large = unit * (65536 // len(unit))
    t_small, t_large = _best_of(small), _best_of(large)
    # Eight times the text: linear is about 8x; quadratic would be about 64x.
    # Generous, with a floor for timer noise on tiny figures.
    assert t_large < 24 * t_small + 0.01, (unit, t_small, t_large)
    assert t_large < 0.25, (unit, t_large)


def test_what_the_hostile_shapes_extract() -> None:
    assert extraction.extract(HOSTILE["we_chose"]) == []
    assert extraction.extract(HOSTILE["decided_without_because"]) == []
    assert extraction.extract(HOSTILE["one_huge_sentence"]) == []  # over the sentence cap
    tiny = extraction.extract(HOSTILE["many_tiny_decisions"])
    assert len(tiny) == 1 and tiny[0].statement == "We chose plan A because the tests pass!"
    many = "\n".join(f"We chose plan {i} because test {i} passes." for i in range(500))
    assert len(extraction.extract(many)) == extraction.MAX_STATEMENTS
    # The linear matcher says what the old pattern said on ordinary text.
    assert [e.statement for e in extraction.extract("Notes. After a long call we have decided to pin it because of drift.")] == [
        "We have decided to pin it because of drift."
    ]
    assert extraction.extract("we decided to pin it because") == []  # a reason is needed after "because"
