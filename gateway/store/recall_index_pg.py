"""The recall index on PostgreSQL: a GIN-indexed tsvector per trusted entry,
one table per project (`recall_p<id>`; columns as weights A-D), with FTS5's
tokens (`document`) and Porter stems, ranked by FTS5's BM25: N and the
average length kept in `recall_index`, a word's document frequency counted
by the GIN index, a word's weighted count in a row by `ts_rank_cd` of that
word alone.  Only the rows that can reach the best `limit` are scored
(`PostgresIndex.lexical`)."""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any, NamedTuple, Sequence

from gateway.knowledge.model import Entry
from gateway.store.recall_index import WEIGHTS, Candidate, IndexRow, Terms, columns
from gateway.store.schema import SET_META

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


# ts_rank_cd of a one-word query sums the weights (D, C, B, A; at most 1) of
# the word's instances in the row: scaled back, its weighted count.
SCALE = max(WEIGHTS)
RANK_WEIGHTS = "'{" + ", ".join(repr(w / SCALE) for w in reversed(WEIGHTS)) + "}'"
MAX_COVERS = 64  # sets of stems in one pruning query; past that, every row of those stems is scored

# ?1 words, ?2 their weights, ?3 project: the question's stems, each weighed
# as the sum of its words' weights (FTS5 scores each word apart), with the
# rows holding it (counted by the GIN index) and the project's size.
STEMS_SQL = (
    "SELECT l.lexeme, SUM(w.weight) AS weight, s.rows, s.tokens, "
    "(SELECT COUNT(*) FROM {name} WHERE tsv @@ CAST(quote_literal(l.lexeme) AS tsquery)) AS df "
    "FROM unnest(CAST(? AS TEXT[]), CAST(? AS DOUBLE PRECISION[])) AS w(word, weight), "
    f"unnest(tsvector_to_array(to_tsvector('{CONFIG}', w.word))) AS l(lexeme), "
    "(SELECT GREATEST(rows, 1) AS rows, GREATEST(tokens, 1) AS tokens FROM recall_index WHERE project_id = ?) AS s "
    "GROUP BY l.lexeme, s.rows, s.tokens"
)


class Stem(NamedTuple):
    query: str  # the stem as a tsquery
    bound: float  # weight x IDF x (k1 + 1): more than the stem adds to any row's score
    rows: int  # the rows holding it


def _score_sql(name: str, stems: int) -> str:
    """The best rows matching a tsquery, by BM25.  Parameters: each stem's
    bound, each stem's tsquery twice, the average length, the tsquery, kind
    (twice), now, limit."""
    counts = ", ".join(
        f"CASE WHEN tsv @@ CAST(? AS tsquery) THEN {SCALE} * CAST(ts_rank_cd({RANK_WEIGHTS}, tsv, CAST(? AS tsquery)) "
        f"AS DOUBLE PRECISION) ELSE 0 END AS f{i}" for i in range(stems)
    )
    score = " + ".join(f"CAST(? AS DOUBLE PRECISION) * f{i} / (f{i} + k)" for i in range(stems))
    return (
        f"SELECT seq, kind, {score} AS score FROM (SELECT seq, kind, {counts}, "
        f"{K1} * ({1 - B} + {B} * len / CAST(? AS DOUBLE PRECISION)) AS k FROM {name} "
        "WHERE tsv @@ (SELECT CAST(? AS tsquery)) AND (CAST(? AS TEXT) IS NULL OR kind = ?) AND (expires_at IS NULL OR expires_at > ?) "
        "OFFSET 0) AS r ORDER BY score DESC, seq DESC LIMIT ?"
    )


def covers(bounds: Sequence[float], floor: float) -> list[list[int]]:
    """The smallest sets of stems (indexes into `bounds`, highest first) whose
    bounds add up to `floor`: a row holding none of these sets scores under
    it.  Past MAX_COVERS sets, each stem alone."""
    found: list[list[int]] = []

    def walk(start: int, chosen: list[int], total: float) -> None:
        for i in range(start, len(bounds)):
            if total + sum(bounds[i:]) < floor or len(found) > MAX_COVERS:
                return
            if total + bounds[i] >= floor:
                found.append(chosen + [i])
            else:
                walk(i + 1, chosen + [i], total + bounds[i])

    walk(0, [], 0.0)
    return found if len(found) <= MAX_COVERS else [[i] for i in range(len(bounds))]


def _any(queries: Sequence[str]) -> str:
    return "(" + " | ".join(queries) + ")"


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

    async def add(self, entry: Entry) -> None:
        await self.remove(entry)  # a re-add counts once
        await self.add_many(entry.project_id, [(entry.seq, entry.kind, entry.expires_at, entry.statement, entry.evidence)])

    async def remove(self, entry: Entry) -> None:
        row = await self.tx.one(f"DELETE FROM {table(entry.project_id)} WHERE seq = ? RETURNING len", entry.seq)
        if row is not None:
            await _resize(self.tx, entry.project_id, -1, -int(row["len"]))

    async def changed(self, entry: Entry) -> None:
        """A trusted entry's expiry changed: the row holds it for the filter."""
        await self.tx.run(f"UPDATE {table(entry.project_id)} SET expires_at = ? WHERE seq = ?", entry.expires_at, entry.seq)

    async def add_many(self, project_id: int, rows: Sequence[IndexRow]) -> None:
        """Entries of one project not indexed yet, at once (the rebuild, bulk loaders)."""
        if not rows:
            return
        values = [_values(r) for r in rows]
        await self.tx.run_many(f"INSERT INTO {table(project_id)} (seq, kind, expires_at, len, tsv) VALUES (?, ?, ?, ?, {VECTOR})", values)
        await _resize(self.tx, project_id, len(values), sum(v[3] for v in values))

    async def lexical(self, project_id: int, terms: Terms, kind: str | None, limit: int, now: float) -> list[Candidate]:
        """FTS5's BM25 of the best `limit` rows, the rarest stems' rows first.

        The rows of the stems of highest bound are scored until they are
        `limit` or more; the `limit`-th score is then a floor the others
        must reach, so of the other rows only those holding stems whose
        bounds add up to it are scored (one GIN query).  A stem in most
        rows (IDF near 0) reaches nothing alone: its rows are not read."""
        kept = [(document(w), float(weight)) for w, weight in terms if weight > 0]
        kept = [(w, weight) for w, weight in kept if w]
        if not kept:
            return []
        name = table(project_id)
        rows = await self.tx.all(STEMS_SQL.format(name=name), [w for w, _ in kept], [x for _, x in kept], project_id)
        stems = sorted(
            (Stem("'" + str(r["lexeme"]).replace("'", "''") + "'",
                  r["weight"] * (K1 + 1) * max(math.log((r["rows"] - r["df"] + 0.5) / (r["df"] + 0.5)), 1e-6), r["df"])
             for r in rows if r["df"]),
            key=lambda stem: -stem.bound,
        )
        if not stems:
            return []
        sql = _score_sql(name, len(stems))
        head = [*(s.bound for s in stems), *(s.query for s in stems for _ in range(2)), rows[0]["tokens"] / rows[0]["rows"]]

        async def scored(query: str) -> list[Candidate]:
            found = await self.tx.all(sql, *head, query, kind, kind, now, limit)
            return [Candidate(int(r["seq"]), float(r["score"]), str(r["kind"])) for r in found]

        first = held = 0
        while first < len(stems) and held < limit:
            held += stems[first].rows
            first += 1
        seen = _any([s.query for s in stems[:first]])
        found = await scored(seen)
        rest = stems[first:]
        sets = covers([s.bound for s in rest], found[-1].score if len(found) >= limit else 0.0) if rest else []
        if not sets:
            return found
        found += await scored(_any(["(" + " & ".join(rest[i].query for i in chosen) + ")" for chosen in sets]) + f" & !{seen}")
        found.sort(key=lambda c: (-c.score, -c.seq))
        return found[:limit]


async def _resize(tx: Any, project_id: int, rows: int, tokens: int) -> None:
    """The project's size for BM25, and its generation (writers of one project take turns on the row)."""
    await tx.run(
        "UPDATE recall_index SET generation = generation + 1, rows = rows + ?, tokens = tokens + ? WHERE project_id = ?",
        rows, tokens, project_id,
    )


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
        await index.add_many(project_id, [(r["seq"], r["kind"], r["expires_at"], r["statement"], r["evidence"]) for r in rows])
    await tx.run(SET_META, "recall_index", INDEX_VERSION)
