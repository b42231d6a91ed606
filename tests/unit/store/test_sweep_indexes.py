"""The background sweep finds its rows through indexes, on both stores.

The sweep runs every RELAYROOM_SWEEP_INTERVAL seconds (a minute by
default). On SQLite its statements run on the event loop, so a statement
that scanned a whole table (every entry of the hub, every replay key)
stalled every request for as long as the scan took: about 30 ms with 200k
entries, growing with the hub. Each statement the sweep really sends is
recorded here and its plan read back: no full scan of the tables that grow.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.hub import Hub
from gateway.store.postgres import PostgresTx
from gateway.store.sqlite import SqliteTx

# Each growing table the sweep reads, and the index that must serve it.
GROWING = {"entries": "entries_expiring", "seen_tokens": "seen_tokens_expiry", "webhook_deliveries": "webhook_ids_at"}


def _record(monkeypatch: pytest.MonkeyPatch, tx_class: type) -> list[tuple[str, tuple[Any, ...]]]:
    sent: list[tuple[str, tuple[Any, ...]]] = []
    for name in ("one", "all", "run"):
        real = getattr(tx_class, name)

        async def spy(self: Any, sql: str, *args: Any, _real: Any = real) -> Any:
            sent.append((sql, args))
            return await _real(self, sql, *args)

        monkeypatch.setattr(tx_class, name, spy)
    return sent


async def _plan(hub: Hub, sql: str, args: tuple[Any, ...]) -> str:
    if hub.driver.dialect == "sqlite":
        rows = await hub.driver.read(lambda q: q.tx.all("EXPLAIN QUERY PLAN " + sql, *args))
        return "\n".join(str(r["detail"]) for r in rows)

    async def unit(q: Any) -> str:
        # Tables this small are cheaper to scan, so the planner would not
        # show what it does at scale; with scans priced out it shows
        # whether an index can serve the statement at all.
        await q.tx.run("SET LOCAL enable_seqscan = off")
        rows = await q.tx.all("EXPLAIN " + sql, *args)
        return "\n".join(str(next(iter(r.values()))) for r in rows)

    return await hub.driver.read(unit)


async def test_the_sweep_reads_no_growing_table_whole(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _record(monkeypatch, SqliteTx if hub.driver.dialect == "sqlite" else PostgresTx)
    await hub.sweep()
    swept = [(sql, args, table) for sql, args in sent for table in GROWING if f" {table} " in f" {sql} "]
    assert {table for _, _, table in swept} == set(GROWING), sent  # expired entries, replay keys, webhook ids
    for sql, args, table in swept:
        plan = await _plan(hub, sql, args)
        assert GROWING[table] in plan, f"{sql}\n{plan}"
        if hub.driver.dialect == "sqlite":
            assert not [line for line in plan.splitlines() if line.startswith("SCAN ")], f"{sql}\n{plan}"
        else:
            assert "Seq Scan" not in plan, f"{sql}\n{plan}"
