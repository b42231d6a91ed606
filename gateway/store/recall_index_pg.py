"""The recall index on PostgreSQL: a GIN-indexed tsvector per trusted entry,
one table per project (`recall_p<id>`; columns as weights A-D), with FTS5's
tokens (`document`) and Porter stems, and FTS5's BM25 computed in one
statement (`LEXICAL_SQL`): a word's IDF over the rows the question matches
(every row holding it), N and the average length kept in `recall_index`."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Sequence

from gateway.knowledge.model import Entry
from gateway.store.recall_index import WEIGHTS, Candidate, IndexRow, Terms, bump, columns

CONFIG = "relayroom_porter"
# How the index tables were built: other tables are rebuilt by `install`.
INDEX_VERSION = "bm25-sql-4"
K1, B = 1.2, 0.75

CONFIG_SQL = (
    f"CREATE TEXT SEARCH DICTIONARY {CONFIG} (TEMPLATE = snowball, LANGUAGE = porter)",
    f"CREATE TEXT SEARCH CONFIGURATION {CONFIG} (COPY = simple)",
    f"ALTER TEXT SEARCH CONFIGURATION {CONFIG} ALTER MAPPING FOR asciiword, word, numword, asciihword, hword, "
    f"numhword, hword_asciipart, hword_part, hword_numpart, int, uint, float, sfloat, version WITH {CONFIG}",
)
VECTOR = " || ".join(f"setweight(to_tsvector('{CONFIG}', ?), '{w}')" for w in "ABCD")

_TOKEN = re.compile(r"[^\W_]+")


def tokens(text: str) -> list[str]:
    """`text` as FTS5's unicode61 tokenizer (remove_diacritics 2) cuts it."""
    out = []
    for token in _TOKEN.findall(text.lower()):
        if not token.isascii():
            token = "".join(c for c in unicodedata.normalize("NFD", token) if not unicodedata.combining(c))
        if token:
            out.append(token)
    return out


def document(text: str) -> str:
    """`text` as FTS5 tokens; a two-letter word ending in s gets its s tripled
    (FTS5's porter leaves `ts` alone, PostgreSQL's would make it `t`)."""
    return " ".join(t + "ss" if len(t) == 2 and t[1] == "s" and t != "ss" else t for t in tokens(text))


def table(project_id: int) -> str:
    return f"recall_p{int(project_id)}"


def _frequency() -> str:
    """A lexeme's instances in a row, each weighed by its column."""
    return " + ".join(f"{w!r} * CARDINALITY(ARRAY_POSITIONS(u.weights, '{c}'))" for w, c in zip(WEIGHTS, "ABCD"))


# ?1 words, ?2 their weights, ?3 project, ?4 kind (or NULL), ?5 now, ?6 limit.
LEXICAL_SQL = (
    "WITH q AS MATERIALIZED (SELECT l.lexeme, MAX(w.weight) AS weight "
    "FROM unnest(CAST(? AS TEXT[]), CAST(? AS DOUBLE PRECISION[])) AS w(word, weight), "
    f"unnest(tsvector_to_array(to_tsvector('{CONFIG}', w.word))) AS l(lexeme) GROUP BY l.lexeme), "
    "m AS MATERIALIZED (SELECT r.seq, r.kind, r.expires_at, r.len, u.lexeme, " + _frequency() + " AS f "
    "FROM {name} r, unnest(r.tsv) u "
    "WHERE r.tsv @@ (SELECT CAST(string_agg('''' || lexeme || '''', ' | ') AS tsquery) FROM q) "
    "AND u.lexeme IN (SELECT lexeme FROM q)), "
    "df AS (SELECT lexeme, COUNT(*) AS n FROM m GROUP BY lexeme), "
    "s AS (SELECT GREATEST(rows, 1) AS n, GREATEST(tokens, 1) AS tokens FROM recall_index WHERE project_id = ?) "
    f"SELECT m.seq, m.kind, SUM(q.weight * GREATEST(LN((s.n - df.n + 0.5) / (df.n + 0.5)), 1e-6) "
    f"* m.f * {K1 + 1} / (m.f + {K1} * ({1 - B} + {B} * m.len * s.n / s.tokens))) AS score "
    "FROM m JOIN df ON df.lexeme = m.lexeme JOIN q ON q.lexeme = m.lexeme CROSS JOIN s "
    "WHERE (CAST(? AS TEXT) IS NULL OR m.kind = ?) AND (m.expires_at IS NULL OR m.expires_at > ?) "
    "GROUP BY m.seq, m.kind ORDER BY score DESC, m.seq DESC LIMIT ?"
)


def _values(row: IndexRow) -> tuple[Any, ...]:
    seq, kind, expires_at, statement, evidence = row
    documents = [document(t) for t in columns(statement, evidence, kind)]
    return (seq, kind, expires_at, sum(len(d.split()) for d in documents), *documents)


class PostgresIndex:
    def __init__(self, tx: Any) -> None:
        self.tx = tx

    async def create_project(self, project_id: int) -> None:
        name = table(project_id)
        # kind and expires_at copied from the entry (`changed`): a search reads this table alone.
        await self.tx.run(
            f"CREATE TABLE IF NOT EXISTS {name} (seq BIGINT PRIMARY KEY, kind TEXT NOT NULL, "
            "expires_at DOUBLE PRECISION, len INTEGER NOT NULL, tsv tsvector NOT NULL)"
        )
        await self.tx.run(f"CREATE INDEX IF NOT EXISTS {name}_tsv ON {name} USING gin (tsv)")
        await self.tx.run("INSERT INTO recall_index (project_id) VALUES (?) ON CONFLICT (project_id) DO NOTHING", project_id)

    async def add(self, entry: Entry) -> None:
        await self.remove(entry)  # a re-add counts once
        values = _values((entry.seq, entry.kind, entry.expires_at, entry.statement, entry.evidence))
        await self.tx.run(f"INSERT INTO {table(entry.project_id)} (seq, kind, expires_at, len, tsv) VALUES (?, ?, ?, ?, {VECTOR})", *values)
        await _resize(self.tx, entry.project_id, 1, values[3])

    async def remove(self, entry: Entry) -> None:
        row = await self.tx.one(f"DELETE FROM {table(entry.project_id)} WHERE seq = ? RETURNING len", entry.seq)
        if row is not None:
            await _resize(self.tx, entry.project_id, -1, -int(row["len"]))

    async def changed(self, entry: Entry) -> None:
        await self.tx.run(f"UPDATE {table(entry.project_id)} SET expires_at = ? WHERE seq = ?", entry.expires_at, entry.seq)
        await bump(self.tx, entry.project_id)

    async def add_many(self, project_id: int, rows: Sequence[IndexRow]) -> None:
        await add_many(self.tx, project_id, rows)

    async def lexical(self, project_id: int, terms: Terms, kind: str | None, limit: int, now: float) -> list[Candidate]:
        kept = [(document(w), weight) for w, weight in terms if weight > 0]
        kept = [(w, weight) for w, weight in kept if w]
        if not kept:
            return []
        rows = await self.tx.all(
            LEXICAL_SQL.format(name=table(project_id)),
            [w for w, _ in kept], [float(weight) for _, weight in kept], project_id, kind, kind, now, limit,
        )
        return [Candidate(int(r["seq"]), float(r["score"]), str(r["kind"])) for r in rows]


async def _resize(tx: Any, project_id: int, rows: int, tokens: int) -> None:
    """The project's size for BM25, and its generation (writers of one project take turns on the row)."""
    await tx.run(
        "UPDATE recall_index SET generation = generation + 1, rows = rows + ?, tokens = tokens + ? WHERE project_id = ?",
        rows, tokens, project_id,
    )


async def add_many(tx: Any, project_id: int, rows: Sequence[IndexRow]) -> None:
    """Entries of one project not indexed yet, at once (the rebuild, bulk loaders)."""
    if not rows:
        return
    values = [_values(r) for r in rows]
    await tx.run_many(f"INSERT INTO {table(project_id)} (seq, kind, expires_at, len, tsv) VALUES (?, ?, ?, ?, {VECTOR})", values)
    await _resize(tx, project_id, len(values), sum(v[3] for v in values))


async def install(tx: Any) -> None:
    """The text search configuration, and every project's table built as
    `INDEX_VERSION` says (older ones rebuilt from the trusted entries): run by
    the driver after the migrations, under their lock."""
    row = await tx.one("SELECT value FROM meta WHERE key = 'recall_index'")
    if row is not None and row["value"] == INDEX_VERSION:
        return
    if await tx.one("SELECT 1 AS x FROM pg_ts_config WHERE cfgname = ?", CONFIG) is None:
        for sql in CONFIG_SQL:
            await tx.run(sql)
    await tx.run("DROP TABLE IF EXISTS recall_sizes")
    index = PostgresIndex(tx)
    for project in await tx.all("SELECT id FROM projects ORDER BY id"):
        project_id = int(project["id"])
        for old in (table(project_id), f"recall_df_p{project_id}", f"recall_tf_p{project_id}"):
            await tx.run(f"DROP TABLE IF EXISTS {old}")
        await index.create_project(project_id)
        await tx.run("UPDATE recall_index SET rows = 0, tokens = 0 WHERE project_id = ?", project_id)
        rows = await tx.all(
            "SELECT seq, kind, expires_at, statement, evidence FROM entries WHERE project_id = ? AND state = 'trusted' "
            "ORDER BY seq", project_id,
        )
        await add_many(tx, project_id, [(r["seq"], r["kind"], r["expires_at"], r["statement"], r["evidence"]) for r in rows])
    await tx.run(
        "INSERT INTO meta(key, value) VALUES ('recall_index', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        INDEX_VERSION,
    )
