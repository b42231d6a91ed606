"""The recall index: a project's trusted entries in the store's own full-text index.

What the store offers recall, and nothing more:

- `lexical`: the best trusted, unexpired entries holding any of a list of
  weighted words, scored by the store's native BM25 (SQLite: FTS5's
  `bm25()`; PostgreSQL: the same formula in one SQL statement,
  `gateway.store.recall_index_pg`).  Which words to look for, and with what
  weight, is recall's business (`gateway.recall.query`).
- `generation`: a per-project counter, bumped in the same transaction as any
  change to what recall shows of the project (an entry entering or leaving
  trust, a trusted entry's new expiry or support, a vector written).  A
  process may keep what it derived from the index under a generation, and
  nothing else: a cache is stale exactly when the counter moved.

Each project has its own index table holding its trusted entries only, kept
in step with the `trusted` state inside the transaction that moves the entry,
so a project's recall never scores other projects' rows or candidates.
Expiry is checked at query time.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional, Protocol, Sequence

from gateway.knowledge.model import Entry

# Column weights of the index (statement, evidence, kind, aliases): an entry's
# statement says what it is about; its evidence and the parts of the
# identifiers it names count less.
WEIGHTS = (3.0, 1.0, 0.5, 1.0)
COLUMNS = "statement, evidence, kind, aliases"
TOKENIZE = "porter unicode61 remove_diacritics 2"

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z0-9])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


class Candidate(NamedTuple):
    """One entry the index found: higher scores are better."""

    seq: int
    score: float
    kind: str


# (weighted word) pairs: the words recall looks for, and how much each counts.
Terms = Sequence[tuple[str, float]]


class RecallIndex(Protocol):
    async def create_project(self, project_id: int) -> None: ...

    async def add(self, entry: Entry) -> None: ...

    async def remove(self, entry: Entry) -> None: ...

    async def changed(self, entry: Entry) -> None: ...

    async def add_many(self, project_id: int, rows: Sequence[IndexRow]) -> None: ...

    async def lexical(self, project_id: int, terms: Terms, kind: str | None, limit: int, now: float) -> list[Candidate]: ...


def identifier_parts(text: str) -> str:
    """The pieces of identifiers written together: `ConfigToml` -> `config
    toml`, `HTTPClient` -> `http client`.  Indexed in a column of their own so
    a question that spells the words apart finds the entry that names the
    identifier (snake_case and kebab-case are split by the tokenizer)."""
    pieces: list[str] = []
    for token in re.findall(r"[A-Za-z0-9]+", text):
        parts = _CAMEL.findall(token)
        if len(parts) > 1:
            pieces.extend(p.lower() for p in parts)
    return " ".join(pieces)


# (seq, kind, expires_at, statement, evidence) of an entry to index in bulk.
IndexRow = tuple[int, str, Optional[float], str, Optional[str]]


def columns(statement: str, evidence: str | None, kind: str) -> tuple[str, str, str, str]:
    """The four indexed texts of an entry: the one place that computes them
    (a contentless FTS5 table must be given the same values to delete a row)."""
    evidence = evidence or ""
    return statement, evidence, kind, identifier_parts(f"{statement} {evidence}")


async def bump(tx: Any, project_id: int) -> None:
    """What recall shows of the project changed, in this transaction."""
    await tx.run("UPDATE recall_index SET generation = generation + 1 WHERE project_id = ?", project_id)


async def generation(tx: Any, project_id: int) -> int:
    row = await tx.one("SELECT generation FROM recall_index WHERE project_id = ?", project_id)
    return int(row["generation"]) if row else 0


def _quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


def fts5_expression(words: Sequence[str]) -> str | None:
    """The words OR-ed as an FTS5 MATCH expression, each a quoted string, so
    that no operator or column filter can be injected; None when empty."""
    return " OR ".join(_quoted(w) for w in words) or None


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
        await self.tx.run("INSERT INTO recall_index (project_id) VALUES (?) ON CONFLICT (project_id) DO NOTHING", project_id)

    async def add(self, entry: Entry) -> None:
        await self.tx.run(
            f"INSERT INTO {self.table(entry.project_id)} (rowid, {COLUMNS}) VALUES (?, ?, ?, ?, ?)", entry.seq, *columns(entry.statement, entry.evidence, entry.kind)
        )
        await bump(self.tx, entry.project_id)

    async def remove(self, entry: Entry) -> None:
        table = self.table(entry.project_id)
        await self.tx.run(
            f"INSERT INTO {table} ({table}, rowid, {COLUMNS}) VALUES ('delete', ?, ?, ?, ?, ?)", entry.seq, *columns(entry.statement, entry.evidence, entry.kind)
        )
        await bump(self.tx, entry.project_id)

    async def changed(self, entry: Entry) -> None:
        """A trusted entry's expiry or supports changed: FTS5 holds neither."""
        await bump(self.tx, entry.project_id)

    async def add_many(self, project_id: int, rows: Sequence[IndexRow]) -> None:
        """Index many entries of one project at once, none indexed yet (the
        benches' bulk loaders)."""
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


def index_for(tx: Any) -> RecallIndex:
    if tx.dialect == "postgres":
        from gateway.store.recall_index_pg import PostgresIndex

        return PostgresIndex(tx)
    return SqliteIndex(tx)
