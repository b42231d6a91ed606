"""Big projects' recall indexes held as arrays, loaded off the event loop.

A project of more than `HELD_ROWS` (300) entries is ranked by FTS5
statements until a copy of its index is held as arrays
(`gateway.store.bm25_arrays`), and from then on by that copy, for as long as
the index keeps the version the copy was read at.

Why loaded on a worker thread: reading a 10,000-entry index (about 230,000
token instances) takes 50-100 ms, and every committed change to the
project's index (a promotion, a new support, a demotion) makes a new
version.  Done in the event loop, each change would hold every request of
the process for that long; done here, the recalls in between are ranked by
FTS5 as before, and none waits.  The worker has a read-only connection of its
own, opened per load, and reads the version and the rows in one
transaction, so a copy is exactly the version it is labelled with.

What a load reads: each row's seq, kind and expiry, each stem's token
instances, and from them, all at once, every (stem, row) pair's weighted
frequency and part of the row's score for recall's weights
(`bm25_arrays.with_pairs`): a question then slices arrays, whatever
words it brings.  At 10,000 entries (230,000 instances, 180,000 pairs),
about 7 MB.

Bounds: only tables of at most `ARRAY_ROWS` rows are loaded, one load at a
time per process, and at most `ARRAY_BYTES` of copies are held over all
tables; past that the least recently used copies are dropped.  A version
is loaded only once searches have seen it for `STABLE_FOR` seconds, and
loads take at most `LOAD_SHARE` of the time (after a load of d seconds the
next waits d * (1 / LOAD_SHARE - 1)): a project whose index changes every
few hundred milliseconds (a review, a burst of promotions) stays on FTS5
until it settles, rather than load copy after copy, each used for a moment.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from gateway.recall.search import DEFAULT_RANKING
from gateway.store.bm25_ranking import column_weights

if TYPE_CHECKING:  # numpy is imported by the first load, not by every process that opens a store
    import numpy as np

    from gateway.store.bm25_arrays import ArrayTable

log = logging.getLogger("relayroom.store")

# A 10,000-entry copy is about 7 MB: a project of this many fits the bound
# below with room; a bigger one is not read at all (the read itself needs
# its size again, for a moment).
ARRAY_ROWS = 50_000
ARRAY_BYTES = 64 << 20  # all copies of a process together (10,000 entries: about 7 MB)
LOAD_SHARE = 0.1
STABLE_FOR = 1.0  # seconds a version must have been seen before its copy is loaded
MAX_SEEN = 1024

_COLUMN_CODE = "CASE col WHEN 'statement' THEN 0 WHEN 'evidence' THEN 1 WHEN 'kind' THEN 2 ELSE 3 END"


def version_of(conn: sqlite3.Connection, table: str) -> bytes:
    """FTS5's structure record, rewritten by every committed change to the
    table (`gateway.store.fts_counts`): the index's version."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 10").fetchone()
    return bytes(row[0]) if row and row[0] is not None else b""


def _numbers(text: str | None, dtype: type) -> np.ndarray:
    """A comma-separated list of numbers (`group_concat`'s) as an array."""
    import numpy as np

    return np.fromstring(text, dtype=dtype, sep=",") if text else np.empty(0, dtype=dtype)


# Recall's weights, by column: every stem's part of every row's score is
# worked out for these when a copy is loaded (another ranking, as the
# evaluation asks for, works its stems out when asked).
DEFAULT_WEIGHTS = tuple(column_weights(DEFAULT_RANKING)[letter] for letter in "ABCD")


def read(conn: sqlite3.Connection, table: str) -> ArrayTable:
    """The table's index as arrays, in one read transaction of `conn`.

    Each list comes back as one string (`group_concat`) parsed by numpy:
    the event loop's thread needs the interpreter lock too, and SQLite
    builds a string without it, where a row-per-instance fetch takes and
    gives it back at every row (230,000 times at 10k entries: while the
    event loop is busy, each of those waits for it)."""
    import numpy as np

    from gateway.store.bm25_arrays import COLUMN_BITS, ArrayTable, with_pairs

    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_arow USING fts5vocab(main, {table}, 'row')")
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_ainst USING fts5vocab(main, {table}, 'instance')")
    conn.execute("BEGIN")
    try:
        version = version_of(conn, table)
        seqs_text, kinds_text, expiring = conn.execute(
            "SELECT group_concat(seq), group_concat(kind), "
            # '%!.17g': the shortest text that reads back as the same double
            "group_concat(CASE WHEN expires_at IS NULL THEN 'inf' ELSE printf('%!.17g', expires_at) END) "
            f"FROM (SELECT e.seq, e.kind, e.expires_at FROM {table}_docsize d JOIN entries e ON e.seq = d.id "
            "ORDER BY e.seq)"
        ).fetchone()
        # Both vocabularies list the stems in the same (binary) order: the
        # `row` one says how many instances each stem has (and in how many
        # rows), so the instance list cuts into stems.
        terms_text, rows_text, counts_text = conn.execute(
            f"SELECT group_concat(term), group_concat(doc), group_concat(cnt) FROM temp.{table}_arow"
        ).fetchone()
        packed = conn.execute(
            f"SELECT group_concat((doc << {COLUMN_BITS}) | {_COLUMN_CODE}) FROM temp.{table}_ainst"
        ).fetchone()[0]
    finally:
        conn.execute("COMMIT")
    seqs = _numbers(seqs_text, np.int64)
    instances = _numbers(packed, np.int64)
    counts = _numbers(counts_text, np.int64)
    terms = terms_text.split(",") if terms_text else []  # a token never holds a comma
    # The reads must agree (one snapshot, one order): the instances add up
    # stem by stem, and each stem's slice holds as many rows as the `row`
    # vocabulary says (`with_pairs`).  If not, the table is left to FTS5.
    if len(terms) != len(counts) or int(counts.sum()) != len(instances):
        raise RuntimeError(f"{table}: {int(counts.sum())} instances by stem, {len(instances)} listed")
    # Rows by their place in `seqs`, not their seq.
    places = np.searchsorted(seqs, instances >> COLUMN_BITS)
    instances = (places << COLUMN_BITS) | (instances & ((1 << COLUMN_BITS) - 1))
    copy = ArrayTable(
        version=version,
        seqs=seqs,
        lengths=np.bincount(places, minlength=len(seqs)).astype(np.float64),
        kinds=kinds_text.split(",") if kinds_text else [],
        expires=_numbers(expiring, np.float64),
        instances=instances,
        stems={term: i for i, term in enumerate(terms)},
        offsets=[0, *np.cumsum(counts).tolist()],
    )
    try:
        return with_pairs(copy, DEFAULT_WEIGHTS, _numbers(rows_text, np.int64))
    except ValueError as e:
        raise RuntimeError(f"{table}: {e}") from None


def load(path: str, table: str) -> tuple[ArrayTable, float]:
    """The table's copy, and the seconds the load took."""
    started = time.monotonic()
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"  # percent-encoded: a path may hold '?' or '#'
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        copy = read(conn, table)
    finally:
        conn.close()
    return copy, time.monotonic() - started


class ArrayTables:
    """The process's array copies, by table, and the one load in flight.
    Used from one event loop; the loads run on its worker thread."""

    def __init__(self, path: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # A database in memory cannot be opened by a second connection.
        self._path = path if path and path != ":memory:" else None
        self._held: OrderedDict[str, ArrayTable] = OrderedDict()
        self._bytes = 0
        self._loading: dict[str, asyncio.Future[tuple[ArrayTable, float]]] = {}
        self._resume_at = 0.0  # the clock's time before which no load starts (LOAD_SHARE)
        self._failed: dict[str, bytes] = {}  # table -> the version a load failed at: not tried again
        self._seen: dict[str, tuple[bytes, float]] = {}  # table -> its version, and when a search first saw it
        self._executor: ThreadPoolExecutor | None = None

    def get(self, table: str, version: bytes, rows: int) -> ArrayTable | None:
        """The copy of `table` at `version`, or None: then a load of that
        version is started if the table is small enough, searches have seen
        the version for `STABLE_FOR` seconds, no load is running, the last
        one's `LOAD_SHARE` wait is over, and this version has not failed."""
        held = self._held.get(table)
        if held is not None and held.version == version:
            self._held.move_to_end(table)
            return held
        if self._path is None or rows > ARRAY_ROWS or self._failed.get(table) == version:
            return None
        now = self._clock()
        seen = self._seen.get(table)
        if seen is None or seen[0] != version:
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen[table] = (version, now)
            seen = self._seen[table]
        if now - seen[1] < STABLE_FOR or now < self._resume_at or self._loading:
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relayroom-arrays")
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, load, self._path, table)
        self._loading[table] = future
        future.add_done_callback(lambda done: self._loaded(table, version, done))
        return None

    def _loaded(self, table: str, asked: bytes, done: asyncio.Future[tuple[ArrayTable, float]]) -> None:
        self._loading.pop(table, None)
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            log.warning("recall index %s not held as arrays: %s", table, error)
            self._failed[table] = asked
            return
        copy, took = done.result()
        self._resume_at = self._clock() + took * (1 / LOAD_SHARE - 1)
        old = self._held.pop(table, None)
        if old is not None:
            self._bytes -= old.nbytes
        if copy.nbytes > ARRAY_BYTES:
            # Too big to hold at all: not loaded again at this version (each
            # new version tries once more, within LOAD_SHARE).
            log.info("recall index %s not held as arrays: %.1f MB, more than all copies may take",
                     table, copy.nbytes / 1e6)
            self._failed[table] = copy.version
            return
        log.info("recall index %s held as arrays: %d rows, %.1f MB, read in %.0f ms",
                 table, copy.rows, copy.nbytes / 1e6, took * 1000)
        while self._held and self._bytes + copy.nbytes > ARRAY_BYTES:
            _, dropped = self._held.popitem(last=False)
            self._bytes -= dropped.nbytes
        self._held[table] = copy
        self._bytes += copy.nbytes

    async def settled(self) -> None:
        """Wait for the load in flight, if any (tests, benchmarks)."""
        while self._loading:
            await asyncio.gather(*self._loading.values(), return_exceptions=True)
            await asyncio.sleep(0)  # the done callbacks run

    async def close(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
        self._held.clear()
        self._bytes = 0
