"""The recall index: full-text search over a project's trusted entries.

Only trusted entries are indexed, and each project has an index of its own,
so a project's recall never scores rows of other projects or candidates
(the hub may hold a million entries; one project's recall reads its own).
The index is kept in step with the `trusted` state inside the transaction
that moves the entry (`Queries.set_state`).
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.model import Entry
from gateway.search import fts5_match

# BM25 column weights: the statement is the claim; evidence supports it.
STATEMENT_WEIGHT = 3.0
EVIDENCE_WEIGHT = 1.0
KIND_WEIGHT = 0.5


class SearchIndex(Protocol):
    async def create_project(self, project_id: int) -> None: ...

    async def add(self, entry: Entry) -> None: ...

    async def remove(self, entry: Entry) -> None: ...

    async def search(
        self, project_id: int, query: str, kind: str | None, limit: int, now: float
    ) -> list[tuple[int, float]]: ...


class SqliteFtsIndex:
    """One contentless FTS5 table per project, rowid = entries.seq."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx

    @staticmethod
    def table(project_id: int) -> str:
        return f"fts_p{int(project_id)}"

    async def create_project(self, project_id: int) -> None:
        await self.tx.run(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.table(project_id)} USING fts5("
            "statement, evidence, kind, content='', tokenize='porter unicode61 remove_diacritics 2')"
        )

    async def add(self, entry: Entry) -> None:
        await self.tx.run(
            f"INSERT INTO {self.table(entry.project_id)} (rowid, statement, evidence, kind) VALUES (?, ?, ?, ?)",
            entry.seq,
            entry.statement,
            entry.evidence or "",
            entry.kind,
        )

    async def remove(self, entry: Entry) -> None:
        table = self.table(entry.project_id)
        await self.tx.run(
            f"INSERT INTO {table} ({table}, rowid, statement, evidence, kind) VALUES ('delete', ?, ?, ?, ?)",
            entry.seq,
            entry.statement,
            entry.evidence or "",
            entry.kind,
        )

    async def search(
        self, project_id: int, query: str, kind: str | None, limit: int, now: float
    ) -> list[tuple[int, float]]:
        match = fts5_match(query)
        if match is None:
            return []
        table = self.table(project_id)
        # bm25() is lower-is-better; the score returned is its negation so
        # that higher is better in the API.  Expiry is checked on the entry.
        sql = (
            f"SELECT f.rowid AS seq, -bm25({table}, ?, ?, ?) AS score FROM {table} f "
            "JOIN entries e ON e.seq = f.rowid "
            f"WHERE {table} MATCH ? AND e.state = 'trusted' AND (e.expires_at IS NULL OR e.expires_at > ?)"
        )
        args: list[Any] = [STATEMENT_WEIGHT, EVIDENCE_WEIGHT, KIND_WEIGHT, match, now]
        if kind is not None:
            sql += " AND e.kind = ?"
            args.append(kind)
        sql += " ORDER BY score DESC LIMIT ?"
        args.append(limit)
        rows = await self.tx.all(sql, *args)
        return [(int(r["seq"]), float(r["score"])) for r in rows]


def index_for(tx: Any) -> SearchIndex:
    if tx.dialect == "postgres":
        from gateway.store.search_postgres import PostgresFtsIndex

        return PostgresFtsIndex(tx)
    return SqliteFtsIndex(tx)
