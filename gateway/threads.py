"""Thread messages: kept as posted, and mined for durable statements.

Posting a message stores it and, in the same transaction, writes every
statement `gateway.extraction` finds as a candidate through
`knowledge.write_candidate` (the one door every new entry goes through:
`created_via: extraction`, the thread and message as provenance).
Extraction never makes anything trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.clock import HOUR, Clock
from gateway.errors import Invalid
from gateway.extraction import extract
from gateway.ids import new_id
from gateway.knowledge import Knowledge, over_budget, require, validate_text, write_candidate
from gateway.model import Principal
from gateway.store.base import Driver
from gateway.store.queries import Queries

MAX_THREAD_ID = 200
MAX_AUTHOR = 200
MAX_TEXT = 32000


@dataclass(frozen=True)
class PostedMessage:
    message_id: str
    candidates: list[str] = field(default_factory=list)  # entries this message created
    duplicates: list[str] = field(default_factory=list)  # live entries it repeated

    def to_json(self) -> dict[str, Any]:
        return {"message_id": self.message_id, "candidates": self.candidates, "duplicates": self.duplicates}


def validate_thread_id(thread_id: Any) -> str:
    if (
        not isinstance(thread_id, str)
        or not thread_id.strip()
        or len(thread_id) > MAX_THREAD_ID
        or any(ord(ch) < 32 or ord(ch) == 127 for ch in thread_id)
    ):
        raise Invalid(
            f"thread_id must be 1 to {MAX_THREAD_ID} printable characters", code="invalid_thread_id"
        )
    return thread_id


class Threads:
    def __init__(self, driver: Driver, clock: Clock, knowledge: Knowledge) -> None:
        self.driver = driver
        self.clock = clock
        self.knowledge = knowledge

    async def post_message(self, principal: Principal, thread_id: Any, author: Any, text: Any) -> PostedMessage:
        require(principal, "write", "posting a thread message")
        thread_id = validate_thread_id(thread_id)
        author = validate_text(author, "author", MAX_AUTHOR)
        text = validate_text(text, "text", MAX_TEXT)
        assert author is not None and text is not None
        message_id = new_id("msg")
        project = principal.project
        project_id = project.id
        now = self.clock.now()
        statements = extract(text)  # pure: found before the transaction opens
        provenance = {"thread_id": thread_id, "message_id": message_id, "author": author}

        limit = self.knowledge.limits.events_per_hour

        async def store(q: Queries) -> PostedMessage:
            # A message is an agent event like any other: the same hourly
            # budget keeps a loop from flooding the review queue.
            count, oldest = await q.count_thread_messages_since(project_id, principal.name, now - HOUR)
            refusal = over_budget("thread messages", principal.name, limit, count, oldest, now)
            if refusal is not None:
                raise refusal
            await q.insert_thread_message(message_id, project_id, thread_id, author, text, principal.name, now)

            posted = PostedMessage(message_id)
            for found in statements:
                entry, duplicate = await write_candidate(
                    q,
                    project,
                    author=principal.name,
                    kind=found.kind,
                    statement=found.statement,
                    evidence=None,
                    via="extraction",
                    now=now,
                    provenance=dict(provenance, line=found.line),
                )
                (posted.duplicates if duplicate else posted.candidates).append(entry.id)
            return posted

        return await self.driver.write(store)
