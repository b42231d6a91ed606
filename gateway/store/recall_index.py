"""The recall index: each project's trusted entries in the store's own full-text index.

What the store offers recall: `lexical`, the best trusted, unexpired entries
holding any of a list of weighted words by the store's native BM25; and the
project's generation in `recall_index`, a counter bumped (`bump`) in the
transaction of any change to the project's trusted entries or their vectors
(an entry entering or leaving trust, a vector written), the one key a process
may keep derived data of them under.  A support or a new expiry does not
move it: nothing kept holds those.
One table per project, written with the move into or out of trust.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

from gateway.knowledge.model import Entry

if TYPE_CHECKING:
    from gateway.store.recall_index_pg import PostgresIndex

# Column weights (statement, evidence, kind, aliases): the statement says what an entry is about.
WEIGHTS = (3.0, 1.0, 0.5, 1.0)
COLUMNS = "statement, evidence, kind, aliases"
TOKENIZE = "porter unicode61 remove_diacritics 2"

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z0-9])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


class Candidate(NamedTuple):
    seq: int
    score: float  # higher is better
    kind: str


Terms = Sequence[tuple[str, float]]  # the words recall looks for, each with its weight
# (seq, kind, expires_at, statement, evidence) of an entry to index in bulk.
IndexRow = tuple[int, str, Optional[float], str, Optional[str]]


def identifier_parts(text: str) -> str:
    """The pieces of identifiers written together (`ConfigToml` -> `config toml`):
    a question that spells the words apart still meets the entry."""
    pieces: list[str] = []
    for token in re.findall(r"[A-Za-z0-9]+", text):
        parts = _CAMEL.findall(token)
        if len(parts) > 1:
            pieces.extend(p.lower() for p in parts)
    return " ".join(pieces)


def columns(statement: str, evidence: str | None, kind: str) -> tuple[str, str, str, str]:
    """The four indexed texts (a contentless FTS5 table deletes a row by the same values)."""
    evidence = evidence or ""
    return statement, evidence, kind, identifier_parts(f"{statement} {evidence}")


async def bump(tx: Any, project_id: int) -> None:
    """The project's trusted entries or their vectors changed, in this transaction."""
    await tx.run("UPDATE recall_index SET generation = generation + 1 WHERE project_id = ?", project_id)


def fts5_expression(words: Sequence[str]) -> str | None:
    """The words OR-ed, each a quoted string: no operator or column filter can be injected."""
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words) or None


async def live(tx: Any, seqs: Sequence[int], kind: str | None, now: float) -> dict[int, str]:
    """seq -> kind of those of `seqs` that are trusted and unexpired now (and of `kind`)."""
    if not seqs:
        return {}
    marks = ", ".join("?" for _ in seqs)
    sql = f"SELECT seq, kind FROM entries WHERE seq IN ({marks}) AND state = 'trusted' AND (expires_at IS NULL OR expires_at > ?)"
    args: list[Any] = [*seqs, now]
    if kind is not None:
        sql += " AND kind = ?"
        args.append(kind)
    return {int(r["seq"]): str(r["kind"]) for r in await tx.all(sql, *args)}


class SqliteIndex:
    """One contentless FTS5 table per project (`fts_p<id>`), rowid = entries.seq."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx

    @staticmethod
    def table(project_id: int) -> str:
        return f"fts_p{int(project_id)}"

    async def create_project(self, project_id: int) -> None:
        await self.tx.run(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.table(project_id)} USING fts5("
            f"{COLUMNS}, content='', tokenize='{TOKENIZE}')"
        )

    async def add(self, entry: Entry) -> None:
        await self.add_many(entry.project_id, [(entry.seq, entry.kind, entry.expires_at, entry.statement, entry.evidence)])

    async def remove(self, entry: Entry) -> None:
        table = self.table(entry.project_id)
        await self.tx.run(
            f"INSERT INTO {table} ({table}, rowid, {COLUMNS}) VALUES ('delete', ?, ?, ?, ?, ?)", entry.seq, *columns(entry.statement, entry.evidence, entry.kind)
        )
        await bump(self.tx, entry.project_id)

    async def changed(self, entry: Entry) -> None:
        """A trusted entry's expiry changed: FTS5 does not hold it (recall
        reads it from the entry), nor does the vector matrix."""

    async def add_many(self, project_id: int, rows: Sequence[IndexRow]) -> None:
        """Entries of one project not indexed yet, at once (bulk loaders)."""
        await self.tx.run_many(
            f"INSERT INTO {self.table(project_id)} (rowid, {COLUMNS}) VALUES (?, ?, ?, ?, ?)",
            [(seq, *columns(statement, evidence, kind)) for seq, kind, _, statement, evidence in rows],
        )
        await bump(self.tx, project_id)

    async def lexical(self, project_id: int, terms: Terms, kind: str | None, limit: int, now: float) -> list[Candidate]:
        """FTS5's bm25 of each weight's words (a statement each: FTS5 weighs a
        phrase only by repeating it), summed with the weights."""
        groups: dict[float, list[str]] = {}
        for word, weight in terms:
            if word and weight > 0:
                groups.setdefault(weight, []).append(word)
        if not groups:
            return []
        table = self.table(project_id)
        score = f"bm25({table}, " + ", ".join(repr(w) for w in WEIGHTS) + ")"
        sql = f"SELECT rowid AS seq, -{score} AS score FROM {table} WHERE {table} MATCH ? ORDER BY score DESC LIMIT ?"
        wanted = limit
        for attempt in range(2):
            scores: dict[int, float] = {}
            full = False
            for weight, words in groups.items():
                expression = fts5_expression(words)
                assert expression is not None
                if kind is not None:  # a kind validated against the four kinds
                    expression = f'kind : "{kind}" AND ({expression})'
                rows = await self.tx.all(sql, expression, wanted)
                full = full or len(rows) == wanted
                for r in rows:
                    scores[int(r["seq"])] = scores.get(int(r["seq"]), 0.0) + weight * float(r["score"])
            kinds = await live(self.tx, list(scores), kind, now)
            # Expired entries leave recall at once but the index only at the
            # sweep: if they crowded the top, look further down once.
            if len(kinds) >= min(limit, len(scores)) or not full or attempt:
                break
            wanted *= 8
        found = [Candidate(seq, s, kinds[seq]) for seq, s in scores.items() if seq in kinds]
        found.sort(key=lambda c: (-c.score, -c.seq))
        return found[:limit]


def index_for(tx: Any) -> "SqliteIndex | PostgresIndex":
    if tx.dialect == "postgres":
        from gateway.store.recall_index_pg import PostgresIndex

        return PostgresIndex(tx)
    return SqliteIndex(tx)
