"""Thread messages: kept as posted, and mined for durable statements.

Posting a message stores it and, in the same transaction, writes every
statement `gateway.knowledge.extraction` finds as a candidate through
`candidates.write_candidate` (the one door every new entry goes through:
`created_via: extraction`, the thread and message as provenance).
Extraction never makes anything trusted.

Budgets (docs/security.md, Limits), in this order, so that a principal over one costs an
indexed count and nothing else:

1. before extraction, one read: the poster's thread messages this hour
   (against the event budget) and its candidates this hour (against the
   candidate budget it shares with learn and proposals);
2. extraction, off the event loop for a long message (it is linear, but
   64 KiB of it should not hold up other requests);
3. in the write, the same counts again under the budget locks (another
   process may have spent the budget meanwhile); the candidates this message
   would create must fit in what is left, or the whole message is refused
   and nothing is written.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from gateway.knowledge import trust
from gateway.core.clock import HOUR, Clock
from gateway.core.errors import Invalid, RateLimited
from gateway.knowledge.extraction import extract
from gateway.core.ids import new_id
from gateway.knowledge.permissions import require
from gateway.knowledge.inputs import refuse_invisible, validate_text
from gateway.knowledge.candidates import write_candidate
from gateway.knowledge.service import Knowledge, over_budget
from gateway.knowledge.model import Principal
from gateway.store.base import Driver
from gateway.store.queries import Queries

MAX_THREAD_ID = 200
MAX_AUTHOR = 200
# As long as the request body allows (64 KiB): extraction is linear, so
# length costs time in proportion, never a stall.
MAX_TEXT = 65536
# Above this many characters extraction runs in a worker thread.
INLINE_EXTRACTION_CHARS = 4096


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
    refuse_invisible(thread_id, "thread_id")  # kept as the provenance of every entry the message yields
    return thread_id


class Threads:
    def __init__(self, driver: Driver, clock: Clock, knowledge: Knowledge) -> None:
        self.driver = driver
        self.clock = clock
        self.knowledge = knowledge

    async def post_message(self, principal: Principal, thread_id: Any, author: Any, text: Any) -> PostedMessage:
        require(principal, "post_message")
        thread_id = validate_thread_id(thread_id)
        author = validate_text(author, "author", MAX_AUTHOR)
        text = validate_text(text, "text", MAX_TEXT)
        assert author is not None and text is not None
        message_id = new_id("msg")
        project = principal.project
        project_id = project.id
        now = self.clock.now()
        limits = self.knowledge.limits
        name = principal.name

        async def budget_left(q: Queries, *, lock: bool) -> tuple[int, float | None]:
            """(candidates this message may still create, the oldest candidate
            of the hour); raises when the poster is at its message or
            candidate budget already."""
            # A message is an agent event like any other: the event budget
            # keeps a loop from flooding the review queue.
            count, oldest = await q.count_thread_messages_since(project_id, name, now - HOUR, lock=lock)
            refusal = over_budget("thread messages", name, limits.events_per_hour, count, oldest, now)
            if refusal is not None:
                raise refusal
            spent, first = await q.count_candidates_since(project_id, name, now - HOUR, lock=lock)
            refusal = over_budget("candidates", name, limits.learn_per_hour, spent, first, now)
            if refusal is not None:
                raise refusal
            return limits.learn_per_hour - spent, first

        # At a budget already: refused before extraction costs anything.
        await self.driver.read(lambda q: budget_left(q, lock=False))
        if len(text) > INLINE_EXTRACTION_CHARS:
            statements = await asyncio.to_thread(extract, text)
        else:
            statements = extract(text)
        provenance = {"thread_id": thread_id, "message_id": message_id, "author": author}

        async def store(q: Queries) -> PostedMessage:
            left, first = await budget_left(q, lock=True)
            await q.insert_thread_message(message_id, project_id, thread_id, author, text, name, now)
            posted = PostedMessage(message_id)

            async def spend() -> None:
                # Past the budget: the whole message is refused, and raising
                # here rolls back the message and the candidates before it.
                if len(posted.candidates) >= left:
                    raise RateLimited(
                        f"{name} has {left} of its {limits.learn_per_hour} candidates per hour left and this "
                        f"message would create more; retry in {trust.rate_limit_retry_after(first, now)} s "
                        "or post fewer statements",
                        code="rate_limited",
                        retry_after=trust.rate_limit_retry_after(first, now),
                    )

            for found in statements:
                entry, duplicate = await write_candidate(
                    q,
                    project,
                    author=name,
                    kind=found.kind,
                    statement=found.statement,
                    evidence=None,
                    via="extraction",
                    now=now,
                    provenance=dict(provenance, line=found.line),
                    before_insert=spend,
                )
                (posted.duplicates if duplicate else posted.candidates).append(entry.id)
            return posted

        return await self.driver.write(store)
