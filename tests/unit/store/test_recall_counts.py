"""Recall counters (`Dialect.recall_counters`): SQLite keeps a count per
entry of the times it was returned instead of the index on the result rows'
entry; PostgreSQL keeps the index.  Schema version 5 makes the change on a
store that already holds recalls; since version 7 the counters are folded
from the result rows every hundred recalls."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.store import open_driver
from gateway.store.dialect import DIALECTS
from gateway.store.queries.recalls import FOLD_EVERY
from gateway.store.schema import LATEST_VERSION, MIGRATIONS, Only, for_dialect
from gateway.store.sqlite import SqliteDriver


def test_a_statement_for_one_dialect_is_skipped_on_the_other() -> None:
    statements = ["CREATE TABLE a (n {INT})", Only("sqlite", "CREATE TABLE b (n {INT})"), Only("postgres", "SELECT 1")]
    assert for_dialect(statements, "sqlite") == ["CREATE TABLE a (n INTEGER)", "CREATE TABLE b (n INTEGER)"]
    assert for_dialect(statements, "postgres") == ["CREATE TABLE a (n BIGINT)", "SELECT 1"]
    with pytest.raises(ValueError):
        for_dialect([Only("sqlite3", "SELECT 1")], "sqlite")


async def test_the_store_keeps_counters_or_the_index(database_url: str) -> None:
    driver = open_driver(database_url)
    await driver.open()
    try:
        if driver.dialect == "sqlite":
            names = {r["name"] for r in await driver.read(lambda q: q.tx.all("SELECT name FROM sqlite_master"))}
            has_counts, has_index = "recall_counts" in names, "recall_results_entry" in names
        else:
            row = await driver.read(lambda q: q.tx.one(
                "SELECT to_regclass('recall_counts') IS NOT NULL AS counts, "
                "to_regclass('recall_results_entry') IS NOT NULL AS idx"))
            assert row is not None
            has_counts, has_index = row["counts"], row["idx"]
    finally:
        await driver.close()
    keeps = DIALECTS[driver.dialect].recall_counters
    assert (has_counts, has_index) == (keeps, not keeps)


# -- the migration, on SQLite -----------------------------------------------------------

# recall -> the entries it returned (entry seqs); recall 3 returned nothing,
# entry 4 was never returned.
RESULTS = {1: [1, 2], 2: [1], 3: [], 4: [1, 3]}


def _version_4_database(path: Path) -> None:
    """A SQLite store as a gateway of schema version 4 left it, with recalls."""
    conn = sqlite3.connect(path)
    for version, statements in MIGRATIONS:
        if version > 4:
            break
        for sql in for_dialect(statements, "sqlite"):
            conn.execute(sql)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    conn.execute("INSERT INTO projects (slug, created_at, k_distinct_issuers, window_days, playbook_min_trusted, "
                 "playbook_top_n, demotions_per_hour) VALUES ('p', 0, 2, 7, 1, 5, 3)")
    for i in range(1, 5):
        conn.execute("INSERT INTO entries (id, project_id, kind, statement, norm_statement, state, created_at, "
                     "created_by, created_via) VALUES (?, 1, 'fact', 's', 's', 'trusted', 0, 'x', 'rest')", (f"e{i}",))
    for recall, entries in RESULTS.items():
        conn.execute("INSERT INTO recalls (id, project_id, principal, query, via, returned, at) "
                     "VALUES (?, 1, 'x', 'q', 'rest', ?, 0)", (f"r{recall}", len(entries)))
        for rank, entry in enumerate(entries):
            conn.execute("INSERT INTO recall_results VALUES (?, ?, ?, 1.0)", (recall, entry, rank))
    conn.commit()
    conn.close()


async def _counts_and_figures(path: Path) -> tuple[dict[int, int], list[str], dict[int, int], list[str], str | None]:
    """Open the store (migrating it): its counters, its indexes on
    recall_results, each entry's times returned, the entries never recalled
    and the schema version."""
    driver = SqliteDriver(str(path))
    await driver.open()
    try:
        async def unit(q: Any) -> Any:
            counts = {r["entry_seq"]: r["returned"] for r in await q.tx.all("SELECT entry_seq, returned FROM recall_counts")}
            indexes = [r["name"] for r in await q.tx.all(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'recall_results' AND sql IS NOT NULL")]
            returned = {seq: (await q.entry_recall_stats(seq))[0] for seq in range(1, 5)}
            _, never = await q.never_recalled(1, 1.0, 10)
            return counts, indexes, returned, [e.id for e in never], await q.meta_get("schema_version")

        result: tuple[dict[int, int], list[str], dict[int, int], list[str], str | None] = await driver.read(unit)
        return result
    finally:
        await driver.close()


async def test_version_5_counts_the_results_a_version_4_store_holds(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    _version_4_database(path)
    counts, indexes, returned, never, version = await _counts_and_figures(path)
    assert counts == {1: 3, 2: 1, 3: 1}
    assert indexes == []  # recall_results_entry is gone (the primary key's own index has no sql)
    assert returned == {1: 3, 2: 1, 3: 1, 4: 0}
    assert never == ["e4"]
    assert version == str(LATEST_VERSION)


async def test_version_5_run_again_counts_afresh(tmp_path: Path) -> None:
    """A store set back to an older version number (an operator's restore,
    or a gateway of that version having written result rows without
    counting them) is counted again from its rows, not counted twice."""
    path = tmp_path / "v4.db"
    _version_4_database(path)
    await _counts_and_figures(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE dashboard_sessions")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.execute("INSERT INTO recall_results VALUES (3, 4, 0, 1.0)")  # not counted, as version 4 wrote it
    conn.commit()
    conn.close()
    counts, indexes, returned, never, version = await _counts_and_figures(path)
    assert counts == {1: 3, 2: 1, 3: 1, 4: 1}
    assert indexes == [] and returned == {1: 3, 2: 1, 3: 1, 4: 1} and never == []
    assert version == str(LATEST_VERSION)


# -- the fold, on SQLite ----------------------------------------------------------------


async def test_a_fold_every_hundred_recalls_keeps_the_figures_exact(tmp_path: Path) -> None:
    """A recall writes its result rows only; the FOLD_EVERY-th recall adds
    the rows since the last fold to the counters.  Between folds, an
    entry's times returned and "never recalled" add the rows not folded
    yet, so the figures equal a recount of the rows after every recall."""
    path = tmp_path / "v4.db"
    _version_4_database(path)  # recalls 1-4; entry 4 never returned
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO entries (id, project_id, kind, statement, norm_statement, state, created_at, "
                 "created_by, created_via) VALUES ('e5', 1, 'fact', 's', 's', 'trusted', 0, 'x', 'rest')")
    conn.commit()
    conn.close()
    assert FOLD_EVERY == 100
    driver = SqliteDriver(str(path))
    await driver.open()
    try:
        async def figures(q: Any) -> tuple[dict[int, int], int, dict[int, int], dict[int, int], list[str]]:
            table = {r["entry_seq"]: r["returned"] for r in await q.tx.all("SELECT entry_seq, returned FROM recall_counts")}
            mark = (await q.tx.one("SELECT up_to FROM recall_counts_folded"))["up_to"]
            recount = {r["entry_seq"]: r["n"] for r in await q.tx.all(
                "SELECT entry_seq, COUNT(*) AS n FROM recall_results GROUP BY entry_seq")}
            returned = {seq: (await q.entry_recall_stats(seq))[0] for seq in range(1, 6)}
            count, never = await q.never_recalled(1, 1.0, 10)
            assert count == len(never)
            return table, mark, recount, returned, [e.id for e in never]

        seen: dict[int, tuple[dict[int, int], int, dict[int, int], dict[int, int], list[str]]] = {}
        for n in range(5, 251):
            # Entry 5 is first returned by recall 150, between two folds.
            picked = [5, 1, 2][: 1 + n % 3] if n >= 150 else [1, 2][: n % 3]

            async def unit(q: Any, n: int = n, picked: list[int] = picked) -> None:
                await q.insert_recall(f"r{n}", 1, "x", "q", None, "rest",
                                      [(SimpleNamespace(seq=seq), 1.0) for seq in picked], 2.0)

            await driver.write(unit)
            table, mark, recount, returned, never = seen[n] = await driver.read(figures)
            assert returned == {seq: recount.get(seq, 0) for seq in range(1, 6)}, n
            assert never == (["e4", "e5"] if n < 150 else ["e4"]), n
            assert mark == (n // FOLD_EVERY * FOLD_EVERY if n >= FOLD_EVERY else 4), n
        assert seen[99][0] == seen[5][0] == {1: 3, 2: 1, 3: 1}  # nothing folded before recall 100
        assert seen[100][0] == seen[100][2] and seen[199][0] == seen[100][0]
        assert seen[200][0] == seen[200][2] and 5 in seen[200][0] and 5 not in seen[199][0]
        # Folding again, or everything at once, counts nothing twice.
        for _ in range(2):
            await driver.write(lambda q: q.fold_returned())
            table, mark, recount, returned, _ = await driver.read(figures)
            assert table == recount and mark == 250 and returned == {seq: recount.get(seq, 0) for seq in range(1, 6)}
        await driver.write(lambda q: q.fold_returned(120))  # a mark never goes back
        assert (await driver.read(figures))[:3] == (recount, 250, recount)
    finally:
        await driver.close()


async def test_a_failed_recall_unit_takes_its_fold_with_it(tmp_path: Path) -> None:
    """The fold rides the unit of the recall that triggers it: if that unit
    fails, the counters and the mark stay as they were, and the figures
    are still a recount of the rows that exist."""
    path = tmp_path / "v4.db"
    _version_4_database(path)
    driver = SqliteDriver(str(path))
    await driver.open()
    try:
        for n in range(5, 100):
            await driver.write(lambda q, n=n: q.insert_recall(f"r{n}", 1, "x", "q", None, "rest",
                                                              [(SimpleNamespace(seq=1), 1.0)], 2.0))

        async def failing(q: Any) -> None:
            await q.insert_recall("r100", 1, "x", "q", None, "rest", [(SimpleNamespace(seq=2), 1.0)], 2.0)
            # The hundredth recall folded, in this unit, before it fails.
            assert (await q.tx.one("SELECT up_to FROM recall_counts_folded"))["up_to"] == 100
            raise RuntimeError("after the fold")

        with pytest.raises(RuntimeError):
            await driver.write(failing)

        async def state(q: Any) -> tuple[int, int, int, int]:
            mark = (await q.tx.one("SELECT up_to FROM recall_counts_folded"))["up_to"]
            kept = (await q.tx.one("SELECT returned FROM recall_counts WHERE entry_seq = 1"))["returned"]
            return mark, kept, (await q.entry_recall_stats(1))[0], (await q.entry_recall_stats(2))[0]

        assert await driver.read(state) == (4, 3, 3 + 95, 1)
    finally:
        await driver.close()
