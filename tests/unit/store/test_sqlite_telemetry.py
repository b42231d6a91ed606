"""A group of telemetry only (recall records) commits without waiting for an
fsync; every durable write still commits with synchronous=FULL, and the
record is there for recall_used at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.hub import Hub
from gateway.knowledge.model import Principal
from tests.conftest import ProjectTokens

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def _synchronous(hub: Hub) -> int:
    async def unit(q: Any) -> int:
        row = await q.tx.one("PRAGMA synchronous")
        return int(row["synchronous"])

    return await hub.driver.write(unit)


async def test_telemetry_groups_skip_the_fsync_and_durable_ones_keep_it(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    writer = Principal(project, "agent", "write")
    owner = Principal(project, "olivia", "owner")
    entry, _ = await hub.knowledge.learn(owner, "fact", "Migrations are named by date.")
    await hub.knowledge.confirm(owner, entry.id)
    reader = Principal(project, "reader", "read")
    seen: list[int] = []
    original = hub.driver._writer.execute  # type: ignore[attr-defined]

    def watch(sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            seen.append(int(original("PRAGMA synchronous").fetchone()[0]))
        return original(sql, *args)

    hub.driver._writer = _Watched(hub.driver._writer, watch)  # type: ignore[attr-defined]
    try:
        recall_ids = await asyncio.gather(*(hub.recall.recall(reader, "how are migrations named") for _ in range(3)))
        await asyncio.sleep(0.05)
        telemetry_commits = list(seen)
        seen.clear()
        await hub.knowledge.learn(writer, "fact", "Releases are tagged without a leading v.")
        durable_commits = list(seen)
    finally:
        hub.driver._writer = hub.driver._writer.conn  # type: ignore[attr-defined]
    assert telemetry_commits and set(telemetry_commits) == {1}  # NORMAL: no fsync for recall records
    assert durable_commits == [2]  # FULL for a write that is answered after its commit
    assert await _synchronous(hub) == 2
    for recall_id, results in recall_ids:  # each record is there for recall_used
        assert [e.id for e, _ in results] == [entry.id]
        assert await hub.recall.used(reader, recall_id, entry.id)


class _Watched:
    """The writer connection with its execute observed (sqlite3.Connection's
    methods cannot be replaced on the object itself)."""

    def __init__(self, conn: Any, execute: Any) -> None:
        self.conn = conn
        self.execute = execute

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)
