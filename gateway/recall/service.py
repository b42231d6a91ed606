"""Recall: the trusted, unexpired entries that answer a question, best first.

Every recall is recorded (who asked, what, which entries came back) so that
`recall_used` can be checked against it and the Learning panel can measure
whether recall helps.

Recalls and recorded uses spend the caller's hourly read budget
(`RELAYROOM_RECALLS_PER_HOUR`, docs/security.md, Limits), counted from the store before the
search: one count over two index ranges, inside the transaction the recall
uses anyway.  The recall's count takes no lock (a principal's recalls at once
on several processes may pass the budget by the few in flight); recall_used
counts under a lock, as the write budgets do.  A repeated `recall_used` of a
pair already counted writes nothing and spends nothing.

Counting the whole hour reads every row of it: an agent recalling once a
second had its every recall read some 3,000 index entries, a third of the
recall's time.  So a recall counts the hour exactly once a minute per
principal and process, and in between only the rows since that count: the
reads of the hour now are at most the count then plus the rows since (the
hour's start only moved forward), and while that bound is under the budget
the caller is within it.  At the budget's edge the hour is counted exactly,
so a refusal, and its Retry-After, are what they always were.

"The rows since" differ by store.  On SQLite a recall's id is above every
id committed before it (`Dialect.ordered_ids`), so each check counts the
caller's recalls with an id above the largest its previous check saw, and
adds them up: from the principal's own index, its entries since a second
before that check, a handful for a busy agent instead of its whole minute
(an agent at 30 recalls a second read some 900 index entries a check).  On
PostgreSQL ids do not follow commits, so a check counts the caller's reads
since a second before the exact count.  Either way what a check can miss is
a recall of the same principal in flight for longer than that second.

The ranking (`gateway.recall.stages`) is lexical, or fused with the semantic
stage when the hub handed one in (decided once, from the settings).  A fused
recall computes the query's vector, and its cosines over the project's cached
vectors, on a worker thread while a first read checks the budget and gathers
the lexical candidates; a second read checks that the cached vectors are
still the project's and ranks the candidates with them, then the record is
written.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from gateway.core.clock import HOUR, Clock
from gateway.core.metrics import Metrics
from gateway.core.errors import Invalid, NotFound, RateLimited
from gateway.core.ids import new_id
from gateway.knowledge.inputs import validate_kind
from gateway.knowledge.service import WriteLimits, over_budget
from gateway.knowledge.model import Entry, Principal
from gateway.recall import stages
from gateway.recall.query import MAX_QUERY_CHARS
from gateway.recall.semantic import QueryVector, SemanticStage, SemanticStatus
from gateway.store.base import Driver
from gateway.store.queries import Queries

DEFAULT_LIMIT = 10
MAX_LIMIT = 50
RECOUNT_AFTER = 60.0  # seconds between a principal's exact counts of its hour (per process)
RECENT_MARGIN = 1.0  # seconds before the last count (SQLite: the last check) that the next check reads again
MAX_COUNTED = 10_000  # principals whose last exact count a process keeps


@dataclass(frozen=True)
class Counted:
    """A principal's read budget as this process last counted it."""

    at: float  # when the hour was counted exactly
    reads: int  # its recalls and uses of that hour
    recalls: int  # its recalls recorded since, up to `last_id` (ordered ids only)
    last_id: int  # the largest recall id that count, or the last check, saw (ordered ids only)
    checked: float  # when that count or check was made


class Recall:
    def __init__(
        self,
        driver: Driver,
        clock: Clock,
        metrics: Metrics | None = None,
        limits: Callable[[], WriteLimits] = WriteLimits,
        semantic: SemanticStage | None = None,
        status: SemanticStatus | None = None,
    ) -> None:
        self.driver = driver
        self.clock = clock
        self.limits = limits  # read per call: the hub's budgets as they are now
        self.metrics = metrics  # the recall latency histogram (none in some tests and benches)
        self.semantic = semantic
        self._refused: dict[tuple[int, str], float] = {}  # (project, principal) -> until when, see _embed_while_searching
        self._counted: dict[tuple[int, str], Counted] = {}  # (project, principal) -> its last count
        self.status = status or SemanticStatus("lexical", "lexical recall alone")

    async def _within_budget(self, q: Queries, principal: Principal, now: float, *, lock: bool) -> None:
        limit = self.limits().recalls_per_hour
        key = (principal.project.id, principal.name)
        counted = self._counted.get(key)
        if not lock and counted is not None and 0.0 <= now - counted.at < RECOUNT_AFTER:
            # From a second before the last count or check: a read recorded
            # after it with a moment before it (a recall in flight then, here
            # or in another process) still counts.  On SQLite the ids keep a
            # recall from counting twice; on PostgreSQL the rows of that
            # second count twice, which only makes the bound looser.
            if q.dialect.ordered_ids:
                recalls, uses, last_id = await q.count_reads_after(
                    principal.project.id, principal.name, counted.last_id,
                    counted.checked - RECENT_MARGIN, counted.at - RECENT_MARGIN)
                counted = Counted(counted.at, counted.reads, counted.recalls + recalls, last_id, now)
                self._counted[key] = counted
                if counted.reads + counted.recalls + uses < limit:  # a bound on the hour's reads now
                    return
            else:
                recent, _ = await q.count_reads_since(principal.project.id, principal.name,
                                                      counted.at - RECENT_MARGIN)
                if counted.reads + recent < limit:  # a bound on the hour's reads now
                    return
        count, oldest = await q.count_reads_since(principal.project.id, principal.name, now - HOUR, lock=lock)
        if not lock:
            # A reader's snapshot: only committed rows, so no id seen here
            # can be rolled back and handed out again (a write unit's could).
            last_id = await q.last_recall_id() if q.dialect.ordered_ids else 0
            if len(self._counted) >= MAX_COUNTED:
                self._counted.clear()
            self._counted[key] = Counted(now, count, 0, last_id, now)
        refusal = over_budget("recalls and recall_used calls", principal.name, limit, count, oldest, now)
        if refusal is not None:
            raise refusal

    async def recall(
        self, principal: Principal, query: Any, kind: Any = None, limit: Any = DEFAULT_LIMIT, *, via: str = "rest"
    ) -> tuple[str, list[tuple[Entry, float]]]:
        if not isinstance(query, str):
            raise Invalid("q must be a string", code="invalid_query")
        if len(query) > MAX_QUERY_CHARS:
            raise Invalid(f"q is longer than {MAX_QUERY_CHARS} characters", code="invalid_query")
        if kind is not None:
            validate_kind(kind)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise Invalid(f"limit must be an integer from 1 to {MAX_LIMIT}", code="invalid_limit")
        started = time.perf_counter()
        now = self.clock.now()
        project = principal.project
        recall_id = ""
        stage = self.semantic
        vector: Any = None
        candidates: tuple[stages.Hits, Entry | None] = ([], None)
        if stage is not None and query.strip():
            vector, candidates = await self._embed_while_searching(stage, principal, query, kind, limit, now)

        async def search(q: Queries) -> list[tuple[Entry, float]]:
            if stage is not None and vector is not None:
                return await stages.fused(q, stage, vector, *candidates, project.id, query, kind, limit, now)
            await self._within_budget(q, principal, now, lock=False)  # before the search costs anything
            return await stages.lexical(q, project.id, query, kind, limit, now)

        async def record(q: Queries, results: list[tuple[Entry, float]]) -> None:
            nonlocal recall_id
            recall_id = new_id("rc")  # after the search, as its record's id always was
            await q.insert_recall(recall_id, project.id, principal.name, query, kind, via, results, now)

        # The search reads one snapshot; the record is telemetry, not
        # knowledge: it need not wait for an fsync, and recall_used, a later
        # write, sees it all the same.  On PostgreSQL both run in one
        # transaction; on SQLite as a read, then a write of the group commit.
        results = await self.driver.read_then_write(search, record, durable=False)
        if self.metrics is not None:
            self.metrics.recall_seconds.observe(time.perf_counter() - started)
        return recall_id, results

    async def _embed_while_searching(
        self, stage: SemanticStage, principal: Principal, query: str, kind: str | None, limit: int, now: float
    ) -> tuple[QueryVector, tuple[stages.Hits, Entry | None]]:
        """The query's vector and its nearest rows in the project's cached
        matrix (on a worker thread) and the lexical candidates (a read of the
        store, budget checked first), at the same time: the model is most of
        a fused recall's time.  A caller refused for its budget is remembered
        for a minute, so that a client hammering past its budget does not
        make the model run for each refusal."""
        key = (principal.project.id, principal.name)
        project_id = principal.project.id

        def embed() -> Awaitable[QueryVector]:
            return stage.embed_and_rank(query, project_id, kind, stages.CANDIDATES)

        embedding = asyncio.ensure_future(embed()) if self._refused.get(key, 0.0) <= now else None

        async def lexical(q: Queries) -> tuple[stages.Hits, Entry | None]:
            await self._within_budget(q, principal, now, lock=False)
            hits = await stages.candidates(q, project_id, query, kind, max(limit, stages.HEADROOM), now)
            first = (await q.recalled_entries([hits[0][0]])).get(hits[0][0]) if hits else None
            return hits, first

        try:
            candidates = await self.driver.read(lexical)
        except BaseException as error:
            if embedding is not None:
                embedding.cancel()  # the thread finishes its one query; the result is dropped
            if isinstance(error, RateLimited):
                if len(self._refused) > 10_000:
                    self._refused.clear()
                self._refused[key] = now + 60.0
            raise
        self._refused.pop(key, None)
        vector = await (embedding if embedding is not None else embed())
        return vector, candidates

    async def used(self, principal: Principal, recall_id: Any, entry_id: Any) -> bool:
        """Record that a recalled entry shaped the caller's work.  Each
        (recall, entry) pair counts once; True when this call counted."""
        if not isinstance(recall_id, str) or not isinstance(entry_id, str) or len(recall_id) > 100 or len(entry_id) > 100:
            raise Invalid("recall_id and entry_id must be strings", code="invalid_field")
        project = principal.project
        now = self.clock.now()

        async def unit(q: Queries) -> bool:
            await self._within_budget(q, principal, now, lock=True)
            hit = await q.recall_hit(project.id, recall_id, principal.name, entry_id)
            if hit is None:
                raise NotFound(
                    f"recall {recall_id!r} made by {principal.name} did not return entry {entry_id!r}",
                    code="recall_not_found",
                )
            return await q.insert_recall_use(project.id, hit[0], hit[1], now)

        return await self.driver.write(unit)
