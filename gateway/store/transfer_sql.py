"""The SQL of `relayroom export` / `relayroom import`, for both backends.

A project's rows are read table by table and written back with the same
values, except the store's own integer keys (`seq`, `id` of the audit, the
project's `id`): those are the target's.  Rows that point at an entry or a
recall by integer key are exported with the entry's or recall's public id
and mapped back on import.

`TABLES` names every column that moves; `HUB_TABLES` the tables that belong
to the hub rather than to a project; `DERIVED_TABLES` those rebuilt on the
target from what was carried.  `tests/unit/knowledge/test_transfer.py` checks
the lists against the live schema, so a column added later cannot be
silently left behind by an export.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.store.queries import Queries

TEXT, REAL, INT = "text", "real", "int"


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = False


def _cols(spec: str) -> tuple[Column, ...]:
    """'name:type' or 'name:type?' (nullable), space-separated."""
    out = []
    for item in spec.split():
        name, kind = item.split(":")
        out.append(Column(name, kind.rstrip("?"), kind.endswith("?")))
    return tuple(out)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]  # what the file carries, in this order
    internal: tuple[str, ...] = ()  # the store's own keys and project/entry/recall links, not carried as-is


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table(
            "projects",
            _cols(
                "slug:text created_at:real k_distinct_issuers:int window_days:real playbook_min_trusted:int "
                "playbook_top_n:int demotions_per_hour:int playbook:text"
            ),
            ("id",),
        ),
        Table("tokens", _cols("principal:text level:text token_hash:text created_at:real revoked_at:real?"), ("id", "project_id")),
        Table(
            "entries",
            _cols(
                "id:text kind:text statement:text evidence:text? norm_statement:text state:text created_at:real "
                "created_by:text created_via:text expires_at:real? promoted_at:real? promoted_by:text? provenance:text?"
            ),
            ("seq", "project_id"),
        ),
        Table("supports", _cols("entry:text issuer:text source:text attestation_id:text? at:real"), ("id", "entry_seq")),
        Table(
            "contradictions",
            _cols("entry:text by_principal:text detail:text? at:real until:real"),
            ("id", "entry_seq", "project_id"),
        ),
        Table("audit", _cols("at:real action:text entry_id:text? actor:text detail:text?"), ("id", "project_id")),
        Table("rate_limit_marks", _cols("principal:text kind:text hour:int"), ("project_id",)),
        Table("events", _cols("id:text principal:text type:text detail:text? effect:text at:real"), ("seq", "project_id")),
        Table(
            "recalls",
            _cols("id:text principal:text query:text kind:text? via:text returned:int at:real"),
            ("seq", "project_id"),
        ),
        Table("recall_results", _cols("recall:text entry:text rank:int score:real"), ("recall_seq", "entry_seq")),
        Table("recall_uses", _cols("recall:text entry:text at:real"), ("recall_seq", "entry_seq", "project_id")),
        Table(
            "attestations",
            _cols(
                "id:text issuer:text check_name:text outcome:text counted:int reason:text? provenance:text? "
                "run_url:text? at:real"
            ),
            ("seq", "project_id"),
        ),
        Table(
            "proposals",
            _cols(
                "id:text kind:text statement:text rationale:text? proposed_by:text state:text created_at:real "
                "decided_at:real? decided_by:text? reason:text? entry_id:text?"
            ),
            ("seq", "project_id"),
        ),
        Table(
            "thread_messages",
            _cols("id:text thread_id:text author:text text:text posted_by:text at:real"),
            ("seq", "project_id"),
        ),
        Table(
            "published_checkmaps",
            _cols("source:text content:text sha256:text state:text published_at:real run:text? decided_at:real? "
                  "decided_by:text?"),
            ("id", "project_id"),
        ),
    )
}

# Not a project's: the schema version and secret key, the replay and
# throttle stores of CI credentials (keyed by issuer, shared by every
# project, and only minutes long), and dashboard sessions (hours long, and a
# signed-in browser of the source hub must not be signed in on the target).
HUB_TABLES = ("meta", "seen_tokens", "webhook_deliveries", "jwks_refreshes", "dashboard_sessions")

# Derived and rebuilt on the target rather than carried: the recall index and
# its generation row, the vectors (the fill embeds the trusted entries again),
# and SQLite's recall counters (folded from the imported result rows).
DERIVED_TABLES = ("recall_index", "entry_vectors", "recall_counts", "recall_counts_folded")

# What stands in an exported row for the integer link it replaces.
LINKS = {"entry": "entry_seq", "recall": "recall_seq"}


# How a project's rows of a table are found and ordered, where not by its
# own project_id and key.
ROW_ORDER = {
    "projects": ("t.id = ?", "t.id"),
    "supports": ("entry_ref.project_id = ?", "t.id"),
    "recall_results": ("recall_ref.project_id = ?", "t.recall_seq, t.rank"),
    "rate_limit_marks": ("t.project_id = ?", "t.hour, t.principal, t.kind"),
    "recall_uses": ("t.project_id = ?", "t.recall_seq, t.entry_seq"),
}


def _select(table: Table) -> str:
    return ", ".join(f"{c.name}_ref.id AS {c.name}" if c.name in LINKS else f"t.{c.name}" for c in table.columns)


class TransferQueries:
    """Export reads and import writes, on one transaction's `Queries`."""

    def __init__(self, queries: Queries) -> None:
        self.tx = queries.tx

    # -- export -------------------------------------------------------------------

    async def rows(self, table_name: str, project_id: int) -> list[dict[str, Any]]:
        """A project's rows of one table, in insertion order, links as public ids."""
        table = TABLES[table_name]
        joins = []
        names = {c.name for c in table.columns}
        if "entry" in names:
            joins.append("JOIN entries entry_ref ON entry_ref.seq = t.entry_seq")
        if "recall" in names:
            joins.append("JOIN recalls recall_ref ON recall_ref.seq = t.recall_seq")
        key = "seq" if "seq" in table.internal else "id"
        where, order = ROW_ORDER.get(table_name, ("t.project_id = ?", f"t.{key}"))
        sql = f"SELECT {_select(table)} FROM {table.name} t {' '.join(joins)} WHERE {where} ORDER BY {order}"
        return await self.tx.all(sql, project_id)

    # -- import -------------------------------------------------------------------

    async def entry_seqs(self, project_id: int) -> dict[str, int]:
        return {r["id"]: int(r["seq"]) for r in await self.tx.all("SELECT id, seq FROM entries WHERE project_id = ?", project_id)}

    async def recall_seqs(self, project_id: int) -> dict[str, int]:
        return {r["id"]: int(r["seq"]) for r in await self.tx.all("SELECT id, seq FROM recalls WHERE project_id = ?", project_id)}

    async def _existing(self, table: str, column: str, values: list[str]) -> list[str]:
        """Which of these values of `column` the target's `table` already holds (in any project)."""
        found: list[str] = []
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            rows = await self.tx.all(f"SELECT {column} FROM {table} WHERE {column} IN ({marks})", *chunk)
            found.extend(r[column] for r in rows)
        return found

    async def existing_ids(self, table_name: str, ids: list[str]) -> list[str]:
        return await self._existing(TABLES[table_name].name, "id", ids)

    async def existing_token_hashes(self, hashes: list[str]) -> int:
        return len(await self._existing("tokens", "token_hash", hashes))

    async def insert(self, table_name: str, project_id: int, rows: list[tuple[Any, ...]], links: dict[str, dict[str, int]]) -> None:
        """Insert exported rows (values in `TABLES` order) into a project."""
        if not rows:
            return
        table = TABLES[table_name]
        columns = [LINKS.get(c.name, c.name) for c in table.columns]
        with_project = "project_id" in table.internal
        if with_project:
            columns.append("project_id")
        positions = {c.name: i for i, c in enumerate(table.columns)}
        prepared = []
        for row in rows:
            values = list(row)
            for link, mapping in links.items():
                if link in positions:
                    values[positions[link]] = mapping[values[positions[link]]]
            if with_project:
                values.append(project_id)
            prepared.append(tuple(values))
        marks = ", ".join("?" for _ in columns)
        await self.tx.run_many(f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({marks})", prepared)
