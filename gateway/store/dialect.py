"""What the store's SQL says differently on SQLite and on PostgreSQL.

The statements in `gateway.store.queries` are written once; where the two
backends need different words, a query asks its `Dialect` (`Queries.dialect`)
instead of testing the backend's name.  Everything here follows from two facts:

- SQLite has one writer at a time (`BEGIN IMMEDIATE`, across processes too),
  so a read-modify-write needs no row locks and a count-then-decide unit no
  advisory lock; PostgreSQL runs writers side by side and needs both.
- PostgreSQL binds arrays (`ANY`, `unnest`), so a recall can read its entries
  and record its results in one statement of one SQL text each; SQLite
  expands a list into `?, ?, ...` and runs a statement per table.

The one writer also makes a shared counter cheap on SQLite and costly on
PostgreSQL (`recall_counters`).  Column types differ too
(`schema.DIALECT_TYPES`), and the recall index (`recall_index.index_for`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    # `FOR UPDATE` on the rows a write unit reads before it changes them.
    row_locks: bool
    # The statement that holds a named lock until the transaction ends (its
    # one parameter is the name), or None where writers never overlap.
    advisory_lock: str | None
    # Whether a parameter may be an array (one statement, one SQL text,
    # whatever the number of rows).
    array_params: bool
    # The UTC day number of an epoch column; `{column}` is the column.
    utc_day_sql: str
    # Whether the store keeps a per-entry count of times returned
    # (`recall_counts`, `gateway.store.queries.recalls.FOLD_RETURNED`) instead
    # of an index on `recall_results`, whose entry-major keys scatter a
    # recall's results over many pages of SQLite's log.  PostgreSQL keeps
    # the index: recalls writing side by side in snapshot transactions would
    # fail serialization checks on shared counter rows.
    recall_counters: bool
    # Whether a table's new row always takes an id above every id committed
    # before it, so that the rows above an id read in a snapshot are exactly
    # those committed since: SQLite's one writer at a time and its ids, the
    # table's largest plus one (the read budget counts a busy agent's new
    # recalls this way, `gateway.recall.service`).  PostgreSQL's sequences
    # hand ids out in the order transactions ask, not the order they commit.
    ordered_ids: bool

    def lock_rows(self, of: str | None = None, *, skip_locked: bool = False) -> str:
        """The clause that locks the rows a SELECT reads (of table alias
        `of`; with `skip_locked`, rows another transaction holds are left
        out), or nothing where the single writer makes it needless."""
        if not self.row_locks:
            return ""
        return " FOR UPDATE" + (f" OF {of}" if of else "") + (" SKIP LOCKED" if skip_locked else "")

    def utc_day(self, column: str) -> str:
        return self.utc_day_sql.format(column=column)


SQLITE = Dialect(
    name="sqlite",
    row_locks=False,
    advisory_lock=None,
    array_params=False,
    # Moments are never negative, so the truncating CAST is a floor.
    utc_day_sql="CAST({column} / 86400 AS INTEGER)",
    recall_counters=True,
    ordered_ids=True,
)

POSTGRES = Dialect(
    name="postgres",
    row_locks=True,
    advisory_lock="SELECT pg_advisory_xact_lock(hashtextextended(?, 0)) AS locked",
    array_params=True,
    # PostgreSQL's CAST rounds, hence the FLOOR.
    utc_day_sql="CAST(FLOOR({column} / 86400) AS BIGINT)",
    recall_counters=False,
    ordered_ids=False,
)

DIALECTS = {d.name: d for d in (SQLITE, POSTGRES)}

