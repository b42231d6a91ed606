"""Extraction from thread messages: what is taken, what is left, and that
every extracted statement enters as a candidate with its thread as provenance."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.knowledge.extraction import MAX_STATEMENTS, extract
from tests.support.helpers import audit_actions, bearer, snapshot

TAKEN = [
    ("Pitfall: the pooler cannot do prepared statements.", "pitfall", "The pooler cannot do prepared statements."),
    ("- **Gotcha:** pytest-xdist breaks the sqlite fixtures", "pitfall", "Pytest-xdist breaks the sqlite fixtures"),
    ("trap: cron runs in UTC on the build hosts", "pitfall", "Cron runs in UTC on the build hosts"),
    ("Convention: tests live beside the file they test.", "convention", "Tests live beside the file they test."),
    ("* Rule: migrations are never edited after merge", "convention", "Migrations are never edited after merge"),
    ("Decision: we use SQLite in development.", "decision", "We use SQLite in development."),
    ("1. Decided: releases are cut on Tuesdays", "decision", "Releases are cut on Tuesdays"),
    ("Fact: the public API is versioned under /v1.", "fact", "The public API is versioned under /v1."),
    ("Note: always run make lint before pushing.", "convention", "Always run make lint before pushing."),
    ("IMPORTANT: never force-push to main.", "convention", "Never force-push to main."),
    ("Remember: always pin the Node version in CI.", "convention", "Always pin the Node version in CI."),
    ("**Pitfall**: caches outlive deploys by an hour", "pitfall", "Caches outlive deploys by an hour"),
    (
        "After a long discussion we decided to keep Postgres because the team knows it.",
        "decision",
        "We decided to keep Postgres because the team knows it.",
    ),
    ("We chose httpx over requests because it does async.", "decision", "We chose httpx over requests because it does async."),
    ("So we agreed to squash merges because history stays readable!", "decision",
     "We agreed to squash merges because history stays readable!"),
]

LEFT = [
    "We decided to use Redis.",  # a decision needs its reason
    "Pitfall: is the pooler in transaction mode?",  # a question
    "Pitfall: slow",  # too short
    "Note: the build was slow today",  # a reminder only counts with always/never
    "> Pitfall: quoted text is somebody else's, maybe a pasted recall answer",
    "Summary: nothing durable happened",
    "The pooler cannot do prepared statements.",  # no marker at all
    "",
]


@pytest.mark.parametrize(("line", "kind", "statement"), TAKEN)
def test_extracts_marked_statements(line: str, kind: str, statement: str) -> None:
    found = extract(line)
    assert [(f.kind, f.statement) for f in found] == [(kind, statement)]


@pytest.mark.parametrize("line", LEFT)
def test_leaves_everything_else(line: str) -> None:
    assert extract(line) == []


def test_code_blocks_are_skipped_and_lines_are_numbered() -> None:
    text = "\n".join(
        [
            "Status update.",
            "```",
            "Pitfall: this is inside a code block and stays there",
            "```",
            "Pitfall: the staging database resets on Sundays.",
            "~~~",
            "Convention: also code",
            "~~~",
            "Convention: branch names start with the ticket id.",
        ]
    )
    found = extract(text)
    assert [(f.kind, f.line) for f in found] == [("pitfall", 5), ("convention", 9)]


def test_repeats_inside_one_message_count_once_and_the_count_is_bounded() -> None:
    assert len(extract("Pitfall: the pooler drops prepared statements\npitfall:  The pooler drops   prepared statements")) == 1
    many = "\n".join(f"Fact: service number {i} listens on port {8000 + i}" for i in range(MAX_STATEMENTS + 15))
    assert len(extract(many)) == MAX_STATEMENTS


def test_a_statement_over_the_entry_limit_is_left_out() -> None:
    assert extract("Fact: " + "word " * 500) == []


async def _post(client: Any, token: str, text: str, thread: str = "t-1", author: str = "bob") -> Any:
    return await client.post(
        f"/v1/projects/acme/threads/{thread}/messages", json={"author": author, "text": text}, headers=bearer(token)
    )


async def test_message_statements_become_candidates_with_provenance(client: Any, acme: Any, hub: Any) -> None:
    text = "Morning all.\nPitfall: the pooler cannot do prepared statements.\nWe decided to use pgbouncer because it is small."
    r = await _post(client, acme.writer, text, thread="release-42")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["message_id"].startswith("msg_") and len(body["candidates"]) == 2
    for entry_id in body["candidates"]:
        entry = (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=bearer(acme.owner))).json()
        assert entry["state"] == "candidate"
        assert entry["created_via"] == "extraction"
        assert entry["created_by"] == "agent-7"
        assert entry["provenance"]["thread_id"] == "release-42"
        assert entry["provenance"]["message_id"] == body["message_id"]
        assert await audit_actions(hub, "acme", entry_id) == ["learn"]
    kinds = [(await client.get(f"/v1/projects/acme/entries/{i}", headers=bearer(acme.owner))).json()["kind"] for i in body["candidates"]]
    assert kinds == ["pitfall", "decision"]


async def test_a_message_without_statements_is_kept_and_creates_nothing(client: Any, acme: Any, hub: Any) -> None:
    before = await snapshot(hub)
    r = await _post(client, acme.writer, "Just chatting, nothing to keep.")
    assert r.status_code == 201 and r.json()["candidates"] == []
    after = await snapshot(hub)
    assert after["thread_messages"] == before["thread_messages"] + 1
    assert after["entries"] == before["entries"]


async def test_repeating_a_live_statement_reports_the_duplicate(client: Any, acme: Any) -> None:
    first = (await _post(client, acme.writer, "Pitfall: the pooler cannot do prepared statements.")).json()
    second = (await _post(client, acme.writer, "pitfall: The pooler cannot do  prepared statements.")).json()
    assert second["candidates"] == [] and second["duplicates"] == first["candidates"]


async def test_extraction_never_trusts_even_for_an_owner(client: Any, acme: Any) -> None:
    r = await _post(client, acme.owner, "Convention: owners write candidates too when they chat.")
    entry_id = r.json()["candidates"][0]
    entry = (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=bearer(acme.owner))).json()
    assert entry["state"] == "candidate"


@pytest.mark.parametrize("backend", ["sqlite"])  # input checks: the store makes no difference
@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"author": "bob"}, 422, "missing_field"),
        ({"author": "bob", "text": "x", "state": "trusted"}, 422, "unknown_field"),
        ({"author": "", "text": "Pitfall: something durable here"}, 422, "invalid_field"),
        ({"author": "bob", "text": 7}, 422, "invalid_field"),
        ({"author": "bob", "text": "a\x00b"}, 422, "invisible_text"),
    ],
)
async def test_bad_messages_are_refused_and_change_nothing(
    client: Any, acme: Any, hub: Any, body: dict[str, Any], status: int, code: str
) -> None:
    before = await snapshot(hub)
    r = await client.post("/v1/projects/acme/threads/t/messages", json=body, headers=bearer(acme.writer))
    assert r.status_code == status and r.json()["error"]["code"] == code
    assert await snapshot(hub) == before


@pytest.mark.parametrize("backend", ["sqlite"])  # input checks: the store makes no difference
async def test_levels_and_projects(client: Any, acme: Any, hub: Any) -> None:
    from tests.conftest import make_project

    other = await make_project(hub, "other")
    assert (await _post(client, acme.reader, "Pitfall: readers cannot post messages")).status_code == 403
    assert (await _post(client, other.writer, "Pitfall: tokens of other projects are nothing here")).status_code == 404
    r = await client.post("/v1/projects/acme/threads/t/messages", json={"author": "a", "text": "b"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_credential"
    r = await client.post("/v1/projects/acme/threads/t/messages", content=b"{", headers={**bearer(acme.writer), "content-type": "application/json"})
    assert r.status_code == 400


async def test_thread_messages_share_the_hourly_event_budget(client: Any, acme: Any, hub: Any) -> None:
    from gateway.knowledge.service import WriteLimits

    hub.knowledge.limits = WriteLimits(learn_per_hour=600, events_per_hour=2)
    assert (await _post(client, acme.writer, "hello")).status_code == 201
    assert (await _post(client, acme.writer, "hello again")).status_code == 201
    r = await _post(client, acme.writer, "Pitfall: a loop must not flood the review queue")
    assert r.status_code == 429 and r.headers["retry-after"]
    hub.clock.advance(3601)
    assert (await _post(client, acme.writer, "later")).status_code == 201
