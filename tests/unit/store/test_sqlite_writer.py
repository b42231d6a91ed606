"""The SQLite driver's writer and the recall index's kept counts: what
moved off the request path still happens."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

from gateway.store import sqlite as sqlite_store
from gateway.store.sqlite import SqliteDriver, SqliteTx


async def _open(path: Path) -> SqliteDriver:
    driver = SqliteDriver(str(path))
    await driver.open()
    await driver.write(lambda q: q.tx.run("CREATE TABLE IF NOT EXISTS t (n INTEGER)"))
    return driver


async def test_the_log_is_folded_into_the_database_in_the_background(tmp_path: Path) -> None:
    """SQLite's own checkpoint is off on the writer; the driver's runs after
    CHECKPOINT_EVERY commits, so the database file alone holds those rows."""
    driver = await _open(tmp_path / "s.db")
    try:
        # Commits, not writes, are counted (a group may commit several), so
        # write until the checkpoint has started.
        written = 0
        while driver._checkpointing is None:
            assert written < 20 * sqlite_store.CHECKPOINT_EVERY, "no checkpoint started"
            await driver.write(lambda q, n=written: q.tx.run("INSERT INTO t (n) VALUES (?)", n), durable=written % 2 == 0)
            written += 1
        while driver._checkpointing is not None:
            await asyncio.sleep(0.01)
        shutil.copy(tmp_path / "s.db", tmp_path / "copy.db")  # the file without its log
        conn = sqlite3.connect(tmp_path / "copy.db")
        try:
            # Every row committed before the checkpoint started (the last,
            # not durable, may have been answered before its commit).
            assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] >= written - 1
        finally:
            conn.close()
    finally:
        await driver.close()


async def test_a_write_waits_for_another_connection_holding_the_lock(tmp_path: Path) -> None:
    """The writer first tries BEGIN IMMEDIATE without waiting; when another
    process holds the lock it waits for it on a worker thread, as before."""
    driver = await _open(tmp_path / "s.db")
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
        release.start()
        await driver.write(lambda q: q.tx.run("INSERT INTO t (n) VALUES (1)"))
        release.join()
        assert await driver.read(lambda q: q.tx.one("SELECT COUNT(*) AS c FROM t")) == {"c": 1}
    finally:
        other.close()
        await driver.close()


async def test_a_one_statement_read_sees_the_last_commit_and_keeps_no_snapshot_open(tmp_path: Path) -> None:
    """`read_statement` runs without BEGIN/COMMIT: the statement is its own
    read transaction.  It must see what was committed just before it, and
    hold no snapshot afterwards (a held one would stop a checkpoint from
    emptying the log, which then grows without bound)."""
    driver = await _open(tmp_path / "s.db")
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        for n in range(3):
            await driver.write(lambda q, n=n: q.tx.run("INSERT INTO t (n) VALUES (?)", n))
            row = await driver.read_statement(lambda q: q.tx.one("SELECT COUNT(*) AS c, MAX(n) AS top FROM t"))
            assert row == {"c": n + 1, "top": n}
            await driver.read_statement(lambda q: q.tx.one("SELECT n FROM t ORDER BY n"))  # one row of several
            # TRUNCATE waits for no reader: busy (1) if a snapshot were still open.
            assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
            assert (tmp_path / "s.db-wal").stat().st_size == 0
    finally:
        other.close()
        await driver.close()
