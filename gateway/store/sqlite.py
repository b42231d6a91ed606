"""SQLite backend: WAL, foreign keys, one writer that commits in groups.

Why not a connection per request, or aiosqlite's thread hop per statement:
SQLite allows one writer at a time, and a hop per statement costs more than
the statement.  Instead every write unit goes through one writer task.  It
opens `BEGIN IMMEDIATE`, runs each waiting unit inside its own savepoint (so
one unit's failure rolls back that unit alone), and commits them together;
each caller is answered only after that commit.  `BEGIN` and `COMMIT` (the
steps that wait on other processes' locks and on fsync) run on a worker
thread so the event loop keeps accepting requests, which then ride the next
group.  Statements themselves are microseconds and run in the loop.

Several processes may share the file (`serve --workers N`): `BEGIN IMMEDIATE`
with a busy timeout serialises them.  PostgreSQL is the recommended backend
for more than one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from gateway.core.errors import Unavailable
from gateway.store.base import Driver, T, Unit
from gateway.store.queries import Queries
from gateway.store.schema import META_TABLE, SET_META, expand, upgrades

log = logging.getLogger("relayroom.store")

MAX_GROUP = 256
# The write-ahead log is folded into the database by a connection of its
# own on a worker thread, after this many commits: SQLite's own automatic
# checkpoint runs inside a COMMIT while every write behind it waits, and
# the slowest recalls were the ones that queued behind it.  About as often
# as SQLite would, for commits of recall records (docs/decisions/0001).
CHECKPOINT_EVERY = 150


class SqliteTx:
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def one(self, sql: str, *args: Any) -> dict[str, Any] | None:
        row = self._conn.execute(sql, args).fetchone()
        return dict(row) if row is not None else None

    async def all(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        return [dict(r) for r in self._conn.execute(sql, args).fetchall()]

    async def run(self, sql: str, *args: Any) -> int:
        return self._conn.execute(sql, args).rowcount

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self._conn.executemany(sql, rows)


def _ensure_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Switch a new file to WAL.  The switch needs the file to itself and
    SQLite does not wait for that (processes opening a new file together can
    see "database is locked"), so retry for up to the busy timeout.  Once
    switched the mode is kept in the file, and later opens only read it."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() == "wal" or conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() == "wal":
                return
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)  # runs on a worker thread at open, never on the event loop
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("could not switch the database to WAL mode")


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys = ON")
    _ensure_wal(conn, busy_timeout_ms)
    # FULL: a commit that was answered survives power loss, not only a crash.
    # Group commit amortises the fsync over everyone waiting.
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class SqliteDriver(Driver):
    dialect = "sqlite"

    def __init__(self, path: str, *, busy_timeout_ms: int = 15000) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self._busy_timeout_ms = busy_timeout_ms
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._queue: asyncio.Queue[tuple[Unit[Any], asyncio.Future[Any], bool] | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._read_lock: asyncio.Lock | None = None
        self._stopped = False
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpointing: asyncio.Task[None] | None = None
        self._commits = 0

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._writer = await asyncio.to_thread(_connect, self.path, self._busy_timeout_ms)
        await asyncio.to_thread(self._migrate)
        self._reader = await asyncio.to_thread(_connect, self.path, self._busy_timeout_ms)
        if self.path != ":memory:":
            self._writer.execute("PRAGMA wal_autocheckpoint = 0")
            self._checkpointer = await asyncio.to_thread(_connect, self.path, self._busy_timeout_ms)
        self._commits = 0
        self._queue = asyncio.Queue()
        self._stopped = False
        self._read_lock = asyncio.Lock()
        self._task = asyncio.create_task(self._write_loop(), name="relayroom-sqlite-writer")

    def _migrate(self) -> None:
        conn = self._writer
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(expand(META_TABLE, self.dialect))
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            for version, statements in upgrades(int(row[0]) if row else 0, self.dialect):
                for sql in statements:
                    conn.execute(sql)
                conn.execute(SET_META, ("schema_version", str(version)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        if self._task is not None and self._queue is not None:
            await self._queue.put(None)
            await self._task
            self._task = None
        if self._checkpointing is not None:
            await self._checkpointing
            self._checkpointing = None
        for conn in (self._reader, self._writer, self._checkpointer):
            if conn is not None:
                conn.close()
        self._reader = self._writer = self._checkpointer = None

    async def ping(self) -> bool:
        try:
            await self.read(lambda q: q.tx.one("SELECT 1 AS ok"))
            return True
        except Exception:  # readiness reports the failure; it never raises
            return False

    async def write(self, unit: Unit[T], *, durable: bool = True) -> T:
        """Run `unit` in the next group transaction."""
        if self._queue is None or self._stopped:
            raise Unavailable("the store is not open", code="store_unavailable", retry_after=1)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((unit, future, durable))
        # A caller cancelled while waiting cancels only its future: the unit
        # still runs in its group, and the writer skips answering it.
        return await future

    async def read(self, unit: Unit[T]) -> T:
        assert self._reader is not None and self._read_lock is not None
        async with self._read_lock:
            self._reader.execute("BEGIN")
            try:
                return await unit(Queries(SqliteTx(self._reader)))
            finally:
                self._reader.execute("COMMIT")

    async def read_statement(self, unit: Unit[T]) -> T:
        """`read` for a unit of one statement, without BEGIN and COMMIT
        (`Driver.read_statement`): the statement is its own read
        transaction, which ends when its cursor is released (`SqliteTx`
        keeps none past the call that ran it)."""
        assert self._reader is not None and self._read_lock is not None
        async with self._read_lock:
            return await unit(Queries(SqliteTx(self._reader)))

    async def _write_loop(self) -> None:
        """Take whatever is waiting, run it as one transaction, repeat.

        A failure outside any unit (the file lock, the commit, a bug here)
        fails that group's callers with 503 and the loop goes on; if the loop
        itself ends, every caller still waiting is failed rather than left
        hanging."""
        assert self._queue is not None and self._writer is not None
        queries = Queries(SqliteTx(self._writer))
        try:
            stopping = False
            while not stopping:
                item = await self._queue.get()
                if item is None:
                    break
                group = [item]
                while len(group) < MAX_GROUP and not self._queue.empty():
                    nxt = self._queue.get_nowait()
                    if nxt is None:
                        stopping = True
                        break
                    group.append(nxt)
                await self._run_group(queries, group)
        finally:
            self._stopped = True
            leftovers = [self._queue.get_nowait() for _ in range(self._queue.qsize())]
            closing = Unavailable("the store is closing; retry", code="store_unavailable", retry_after=1)
            _fail([item for item in leftovers if item is not None], closing)

    async def _run_group(self, queries: Any, group: list[Any]) -> None:
        conn = self._writer
        assert conn is not None
        # A group of telemetry only (recall records) commits without its
        # fsync, as PostgreSQL's non-durable transactions do with
        # synchronous_commit off: in WAL mode the commit is in the log the OS
        # holds, so it survives the process being killed, and the next
        # durable commit's fsync carries it to the disk.  A recall then never
        # waits behind the fsync of the recall before it.
        telemetry = all(not durable for _, _, durable in group)
        if telemetry:
            conn.execute("PRAGMA synchronous = NORMAL")
        try:
            await self._run_group_in(conn, queries, group, telemetry)
        finally:
            if telemetry:
                conn.execute("PRAGMA synchronous = FULL")
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY and self._checkpointer is not None and self._checkpointing is None:
            self._commits = 0
            self._checkpointing = asyncio.create_task(self._checkpoint(self._checkpointer))

    async def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Fold the log into the database without waiting for anyone
        (PASSIVE: readers and the writer go on; what a reader still needs is
        folded next time)."""
        try:
            await asyncio.to_thread(conn.execute, "PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:  # the next one retries; the log only grows meanwhile
            log.warning("could not checkpoint the write-ahead log: %s", exc)
        finally:
            self._checkpointing = None

    async def _run_group_in(self, conn: sqlite3.Connection, queries: Any, group: list[Any], telemetry: bool) -> None:
        try:
            if not _begin_without_waiting(conn, self._busy_timeout_ms):
                await asyncio.to_thread(conn.execute, "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            log.warning("could not start a write transaction: %s", exc)
            _fail(group, Unavailable("the store is busy; retry shortly", code="store_busy", retry_after=1))
            return
        outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        try:
            for unit, fut, durable in group:
                conn.execute("SAVEPOINT unit")
                try:
                    result = await unit(queries)
                except Exception as exc:  # the unit's own failure: undo it alone
                    conn.execute("ROLLBACK TO unit")
                    conn.execute("RELEASE unit")
                    outcomes.append((fut, None, exc))
                    continue
                conn.execute("RELEASE unit")
                if durable:
                    outcomes.append((fut, result, None))
                elif not fut.done():
                    # Not worth an fsync to wait for (a recall record): later
                    # units on this connection already see it.
                    fut.set_result(result)
            if telemetry:
                # No fsync and, the checkpoint being elsewhere, no page
                # copying: the log's pages written to the OS, a tenth of a
                # millisecond, cheaper here than the hop to a thread.  The
                # callers answered above send their answers first.
                await asyncio.sleep(0)
                conn.execute("COMMIT")
            else:
                await asyncio.to_thread(conn.execute, "COMMIT")
        except Exception as exc:
            log.error("write transaction failed: %s", type(exc).__name__)
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            _fail(group, Unavailable("the store could not commit; retry", code="store_unavailable", retry_after=1))
            return
        for fut, result, error in outcomes:
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)


def _begin_without_waiting(conn: sqlite3.Connection, busy_timeout_ms: int) -> bool:
    """`BEGIN IMMEDIATE` in the loop if the write lock is free right now
    (False if another process holds it: the caller then waits for it on a
    worker thread).  The lock is nearly always free (one process, or
    processes between their short transactions), and the hop to a thread
    and back was the larger part of a recall record's wait."""
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("BEGIN IMMEDIATE")
        return True
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")


def _fail(group: list[Any], error: Exception) -> None:
    for _, fut, _ in group:
        if not fut.done():
            fut.set_exception(error)
