"""The recall index on PostgreSQL: a tsvector per trusted entry, a GIN index.

Same contract as `SqliteFtsIndex`: only trusted entries are indexed, kept in
step with the state inside the transaction that moves the entry, and a search
returns `[(seq, score)]`, best first, for ANY query text.

Layout: like SQLite's, one index table per project (`recall_p<id>`: seq,
kind, expires_at, tsvector; a GIN index), created with the project, so a
project's recall reads only its own rows whatever the hub holds.  Chosen by
measurement: with 100 other projects of 2,000 entries each, one shared table
(GIN on `(project_id, tsv)` through btree_gin, or on `tsv` plus a btree on
`project_id`) made a question of common words about twice as slow (p50 3.4
-> 7.9 ms, and 5.2 -> 13.0 ms) while a table of its own stayed flat (5.5 ->
5.6 ms).  bench/recall_latency.py showed the same with the real code (before
any bounded candidate set): search p50 at 10k entries 5.6 ms alone,
4.9 ms in a hub with 200k other entries.

Ranking: the same as SQLite's, to the last digit, whatever the project's
size (`gateway.store.bm25`: FTS5's tokens, porter stems and bm25 formula,
computed here from the positions each tsvector keeps; the steps of
`SqliteFtsIndex._ranked`: one ranking when every match fits the list, the
agent's words and the synonyms apart and fused otherwise, common phrases
pruned past COMMON_ROWS).  FTS5 knows, for free, each phrase's rows in the
table, the table's rows and its tokens; PostgreSQL keeps them:

- `recall_df_p<id>` (lexeme, kind, rows): how many index rows of each kind
  hold each lexeme, and `recall_sizes` (project_id, rows, tokens), written
  by `add`, `remove` and `add_many` in the statement that writes the index
  row, so in the transaction that moves the entry.  `add` of an entry
  indexed already takes the old row's counts out first (a re-add counts
  once).  Every writer of a project's counts updates its size row first, so
  two promotions in one project take their turns there (a row lock held to
  the commit) and never deadlock over lexemes; the upserts leave no lost
  update.  That lock is the price: promotions within one project commit one
  after the other (each holds it for the rest of its transaction).
- `recall_tf_p<id>` (lexeme, kind, seq, instances in each column, the row's
  length): a row's postings, written and deleted with its index row in the
  same statements.  A list of terms of one lexeme is scored from them (an
  index-only scan of its lexemes' key ranges) instead of from every matching
  row's tsvector, unnested: at 10k entries a list of common words holds a
  few thousand rows, and unnesting them was most of a recall's time.  Each
  promotion writes a posting per distinct lexeme of its entry.
- A phrase of one lexeme: its rows in the table are the sum over kinds, its
  rows of the kind asked for (SQLite's kind-scoped count) the kind's row; a
  kind's rows are its own word's (every row holds its kind).  A phrase of
  several lexemes ("project's", "don't") is counted by a tsquery of them
  adjacent within one column.  A phrase of no lexeme matches nothing.

A search (`_exact`) is one statement that returns the query's stems, the
project's size and its lexemes' counts, and, for a project of at most
`CANDIDATE_ROWS` rows, every row holding one of the phrases (ranked by
`gateway.store.bm25_ranking.exact_ranking`, as SQLite's projects held in
memory are: small projects stay one statement, and no longer count their
rows).  A bigger project is ranked by `big_ranking` from the
counts: one more statement per ranked list reads the rows of the phrases
SQLite keeps, with where the query's lexemes stand in them (at most
ROW_BUDGET rows a list when phrases were pruned; when every word of the
agent's is common, the rows holding all of them, and if fewer than wanted,
any of them, as SQLite does: those can be thousands).

Prefix phrases (`Ranking.prefix`, not recall's ranking) are the one
exception: `gateway.store.pg_prefix_ranking` ranks them by `ts_rank`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Awaitable, Callable, Sequence

from gateway.knowledge.model import Entry
from gateway.recall.search import (
    COMMON_ROWS,
    DEFAULT_RANKING,
    Candidate,
    Phrase,
    Pruned,
    QueryPlan,
    Ranking,
    identifier_parts,
    plan_query,
    fuse,
    prune,
    rerank,
)
from gateway.store import bm25
from gateway.store.bm25_ranking import column_weights, exact_ranking
from gateway.store.pg_prefix_ranking import prefix_ranking
from gateway.store.pg_tsquery import lexeme, phrase_query, term_query

# FTS5's tokens and porter stems, no stop words (gateway.store.bm25): the
# same words match on both stores.
CONFIG = bm25.CONFIG
# A row's length in tokens, kept beside its vector for BM25 (a generated
# column: every writer of the table, the benches' bulk loaders too, gets it).
TOKENS_FUNCTION = "relayroom_tsv_tokens"
# What the index tables of a database were built with: a database whose meta
# row says otherwise has them rebuilt by `install` (under the migration lock).
INDEX_VERSION = "bm25-porter-3"
# A project of up to this many rows is read whole by the search's one
# statement (`exact_ranking`); a bigger one is ranked from its counts
# (`big_ranking`).
CANDIDATE_ROWS = 1000

VECTOR = (
    f"setweight(to_tsvector('{CONFIG}', ?), 'A') || "
    f"setweight(to_tsvector('{CONFIG}', ?), 'B') || "
    f"setweight(to_tsvector('{CONFIG}', ?), 'C') || "
    f"setweight(to_tsvector('{CONFIG}', ?), 'D')"
)


def table(project_id: int) -> str:
    return f"recall_p{int(project_id)}"


def df_table(project_id: int) -> str:
    """The project's document frequencies: for each lexeme and kind, how
    many of the index table's rows of that kind hold the lexeme."""
    return f"recall_df_p{int(project_id)}"


def tf_table(project_id: int) -> str:
    """The project's postings: for each lexeme and index row holding it, its
    instances in each column and the row's length, so that a list's BM25 is
    read from an index instead of from every matching row's vector."""
    return f"recall_tf_p{int(project_id)}"


# Every project's index size: its rows and their tokens (one row a project,
# kept with its index rows; also what makes writers of one project's counts
# take their turns, see `PostgresFtsIndex.add`).
SIZES = "recall_sizes"


def _columns(statement: str, evidence: str | None, kind: str) -> tuple[str, str, str, str]:
    """The four texts of an entry's vector (statement, evidence, kind,
    identifier parts), cut into FTS5's tokens: the one place that computes them."""
    evidence = evidence or ""
    return (
        bm25.document(statement),
        bm25.document(evidence),
        kind,
        bm25.document(identifier_parts(f"{statement} {evidence}")),
    )


INSTALL_SQL = (
    f"CREATE OR REPLACE FUNCTION {TOKENS_FUNCTION}(v tsvector) RETURNS INTEGER LANGUAGE sql IMMUTABLE PARALLEL SAFE "
    "AS 'SELECT CAST(COALESCE(SUM(CARDINALITY(u.positions)), 0) AS INTEGER) FROM unnest(v) u'",
    f"CREATE TABLE IF NOT EXISTS {SIZES} (project_id BIGINT PRIMARY KEY, rows BIGINT NOT NULL, tokens BIGINT NOT NULL)",
)


async def install(tx: Any) -> None:
    """Make the database's recall index what this module expects: the text
    search configuration, and every project's tables built with it.  Run by
    the driver after the schema's migrations, in their transaction and under
    their lock; a database already at `INDEX_VERSION` is left alone.  Older
    tables (the `english` configuration, ts_rank, no counts) are rebuilt from
    the trusted entries, so an upgrade changes the ranking, never the entries."""
    row = await tx.one("SELECT value FROM meta WHERE key = 'recall_index'")
    if row is not None and row["value"] == INDEX_VERSION:
        return
    for sql in INSTALL_SQL:
        await tx.run(sql)
    if await tx.one("SELECT 1 AS x FROM pg_ts_config WHERE cfgname = ?", CONFIG) is None:
        for sql in bm25.CONFIG_SQL:
            await tx.run(sql)
    index = PostgresFtsIndex(tx)
    for project in await tx.all("SELECT id FROM projects ORDER BY id"):
        project_id = int(project["id"])
        await tx.run(f"DROP TABLE IF EXISTS {table(project_id)}")
        await tx.run(f"DROP TABLE IF EXISTS {df_table(project_id)}")
        await tx.run(f"DROP TABLE IF EXISTS {tf_table(project_id)}")
        await tx.run(f"DELETE FROM {SIZES} WHERE project_id = ?", project_id)
        await index.create_project(project_id)
        rows = await tx.all(
            "SELECT seq, kind, statement, evidence, expires_at FROM entries "
            "WHERE project_id = ? AND state = 'trusted' ORDER BY seq",
            project_id,
        )
        await add_many(tx, project_id, [(r["seq"], r["kind"], r["expires_at"], r["statement"], r["evidence"]) for r in rows])
    await tx.run(
        "INSERT INTO meta(key, value) VALUES ('recall_index', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        INDEX_VERSION,
    )


# A new index row's postings (`new`: its seq, kind, tsv and len), one per
# lexeme: how many of its positions are in each column (weights A-D).
POSTINGS = (
    "INSERT INTO {tf} (lexeme, kind, seq, a, b, c, d, len) SELECT u.lexeme, new.kind, new.seq, "
    + ", ".join(f"CARDINALITY(ARRAY_POSITIONS(u.weights, '{w}'))" for w in "ABCD")
    + ", new.len FROM new, unnest(new.tsv) u RETURNING 1"
)
# The counts of the rows just indexed (`seq = ANY(?)`), added in bulk: the
# project's size row first (every writer of the project's counts takes its
# lock before any lexeme's), then the lexemes in their order; and the rows'
# postings (no other writer touches a row's postings: no order needed).
ADD_MANY_SQL = (
    "WITH new AS MATERIALIZED (SELECT r.seq, r.kind, r.tsv, r.len FROM {name} r WHERE r.seq = ANY(CAST(? AS BIGINT[]))), "
    f"size AS (UPDATE {SIZES} s SET rows = s.rows + (SELECT COUNT(*) FROM new), "
    "tokens = s.tokens + (SELECT COALESCE(SUM(new.len), 0) FROM new) WHERE s.project_id = ? RETURNING s.rows), "
    "df AS (INSERT INTO {df} AS d (lexeme, kind, rows) SELECT u.lexeme, new.kind, COUNT(*) FROM size, new, "
    "unnest(tsvector_to_array(new.tsv)) u(lexeme) GROUP BY u.lexeme, new.kind ORDER BY u.lexeme, new.kind "
    "ON CONFLICT (lexeme, kind) DO UPDATE SET rows = d.rows + excluded.rows RETURNING 1), "
    f"tf AS ({POSTINGS}) "
    "SELECT (SELECT COUNT(*) FROM size) AS sized, (SELECT COUNT(*) FROM df) AS lexemes, (SELECT COUNT(*) FROM tf) AS postings"
)


async def add_many(
    tx: Any, project_id: int, rows: Sequence[tuple[int, str, float | None, str, str | None]], *, batch: int = 5000
) -> None:
    """Index many entries of one project at once, none indexed yet: rows of
    (seq, kind, expires_at, statement, evidence).  What `install` and the
    benches' bulk loaders use (`PostgresFtsIndex.add` one by one costs a
    statement an entry); the counts are kept exactly as `add` keeps them."""
    name = table(project_id)
    for start in range(0, len(rows), batch):
        part = rows[start:start + batch]
        await tx.run_many(
            f"INSERT INTO {name} (seq, kind, expires_at, tsv) VALUES (?, ?, ?, {VECTOR})",
            [(seq, kind, expires, *_columns(statement, evidence, kind)) for seq, kind, expires, statement, evidence in part],
        )
        sql = ADD_MANY_SQL.format(name=name, df=df_table(project_id), tf=tf_table(project_id))
        await tx.one(sql, [r[0] for r in part], project_id)


async def recount(tx: Any, project_id: int) -> tuple[dict[tuple[str, str], int], tuple[int, int]]:
    """The counts as they should be, from the index table itself (for tests
    and checks): {(lexeme, kind): rows}, and (rows, tokens)."""
    name = table(project_id)
    df = await tx.all(
        f"SELECT u.lexeme AS lexeme, r.kind AS kind, COUNT(*) AS n FROM {name} r, "
        "unnest(tsvector_to_array(r.tsv)) u(lexeme) GROUP BY u.lexeme, r.kind"
    )
    size = await tx.one(f"SELECT COUNT(*) AS n, COALESCE(SUM(len), 0) AS total FROM {name}")
    assert size is not None
    return {(str(r["lexeme"]), str(r["kind"])): int(r["n"]) for r in df}, (int(size["n"]), int(size["total"]))


Posting = tuple[str, str, int, int, int, int, int, int]  # lexeme, kind, seq, a, b, c, d, len


async def repostings(tx: Any, project_id: int) -> set[Posting]:
    """The postings as they should be, from the index table itself (tests)."""
    rows = await tx.all(
        f"SELECT u.lexeme AS lexeme, r.kind AS kind, r.seq AS seq, "
        + ", ".join(f"CARDINALITY(ARRAY_POSITIONS(u.weights, '{w}')) AS {w.lower()}" for w in "ABCD")
        + f", r.len AS len FROM {table(project_id)} r, unnest(r.tsv) u"
    )
    return {_posting(r) for r in rows}


async def postings(tx: Any, project_id: int) -> set[Posting]:
    """The postings as kept (`repostings`' shape)."""
    return {_posting(r) for r in await tx.all(f"SELECT lexeme, kind, seq, a, b, c, d, len FROM {tf_table(project_id)}")}


def _posting(r: dict[str, Any]) -> Posting:
    return (str(r["lexeme"]), str(r["kind"]), int(r["seq"]), int(r["a"]), int(r["b"]), int(r["c"]), int(r["d"]), int(r["len"]))


async def counts(tx: Any, project_id: int) -> tuple[dict[tuple[str, str], int], tuple[int, int]]:
    """The counts as kept (`recount`'s shape)."""
    df = await tx.all(f"SELECT lexeme, kind, rows FROM {df_table(project_id)}")
    size = await tx.one(f"SELECT rows, tokens FROM {SIZES} WHERE project_id = ?", project_id)
    kept = (int(size["rows"]), int(size["tokens"])) if size is not None else (-1, -1)
    return {(str(r["lexeme"]), str(r["kind"])): int(r["rows"]) for r in df}, kept


# One statement: the stems of the query's words; the project's size (rows,
# tokens); each query lexeme's rows per kind; for a project of at most
# CANDIDATE_ROWS rows, every row holding one of the query's phrases with
# where the query's lexemes stand in it; for a bigger one instead, the rows
# (all kinds, and of the kind asked for) holding each phrase of several
# lexemes (`?` 4: their tsqueries, adjacency within one column).  Records
# are told apart by which of seq, n, i, df, p is set.
SEARCH_SQL = (
    f"WITH words AS MATERIALIZED (SELECT u.i AS i, tsvector_to_array(to_tsvector('{CONFIG}', u.w)) AS lexemes "
    "FROM unnest(CAST(? AS TEXT[])) WITH ORDINALITY AS u(w, i)), "
    f"q AS MATERIALIZED (SELECT to_tsquery('{CONFIG}', ?) AS q, ARRAY(SELECT DISTINCT unnest(w.lexemes) FROM words w) AS lex), "
    f"size AS MATERIALIZED (SELECT s.rows AS n, s.tokens AS total FROM {SIZES} s WHERE s.project_id = ?) "
    "SELECT r.seq AS seq, r.kind AS kind, r.expires_at AS expires_at, r.len AS len, "
    "ARRAY_AGG(u.lexeme) AS lexemes, ARRAY_AGG(ARRAY_TO_STRING(u.positions, ' ')) AS positions, "
    "ARRAY_AGG(ARRAY_TO_STRING(u.weights, '')) AS columns, CAST(NULL AS BIGINT) AS n, CAST(NULL AS BIGINT) AS total, "
    "CAST(NULL AS BIGINT) AS i, CAST(NULL AS BIGINT) AS df, CAST(NULL AS BIGINT) AS p "
    "FROM q, {name} r, unnest(r.tsv) u "
    "WHERE (SELECT n FROM size) <= {rows} AND r.tsv @@ q.q AND u.lexeme = ANY(q.lex) GROUP BY r.seq "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, size.n, size.total, NULL, NULL, NULL FROM size "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, w.lexemes, NULL, NULL, NULL, NULL, w.i, NULL, NULL FROM words w "
    "UNION ALL SELECT NULL, d.kind, NULL, NULL, ARRAY[d.lexeme], NULL, NULL, NULL, NULL, NULL, d.rows, NULL "
    "FROM q, {df} d WHERE d.lexeme = ANY(q.lex) "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, c.n, c.k, NULL, NULL, t.i "
    "FROM unnest(CAST(? AS TEXT[])) WITH ORDINALITY AS t(q, i), LATERAL (SELECT COUNT(*) AS n, "
    "COUNT(*) FILTER (WHERE r.kind = ?) AS k FROM {name} r "
    f"WHERE (SELECT n FROM size) > {{rows}} AND r.tsv @@ to_tsquery('{CONFIG}', t.q)) c"
)
# A big project's rows holding the kept phrases (`?` 1: a tsquery of
# lexemes, already stems), with where the given lexemes (`?` 2) stand.
ROWS_SQL = (
    "SELECT r.seq AS seq, r.kind AS kind, r.expires_at AS expires_at, r.len AS len, "
    "ARRAY_AGG(u.lexeme) AS lexemes, ARRAY_AGG(ARRAY_TO_STRING(u.positions, ' ')) AS positions, "
    "ARRAY_AGG(ARRAY_TO_STRING(u.weights, '')) AS columns "
    "FROM {name} r, unnest(r.tsv) u WHERE r.tsv @@ CAST(? AS tsquery) AND u.lexeme = ANY(CAST(? AS TEXT[])){kind} "
    "GROUP BY r.seq"
)
# The same rows cut to a list's best (all of its terms of one lexeme), from
# the postings alone: BM25 computed by the server from the postings of the
# list's lexemes (`?` 1-3: each lexeme, its IDF summed over the scored terms,
# whether it is one of the list's; 4: the column weights A-D; 5: the
# average length; 6: the kind term's IDF, 0 for none; 7: the lexemes a row
# must hold, 1 for any; 8: the list's length), its rows kept down to the
# list's last score less a margin (1e-9 relative, where the server's sums
# differ from FTS5's in the last bits), and only their postings of the
# given lexemes (`?` 9) read: `big_ranking` scores them exactly and keeps
# the same best rows as if it had read them all.  The kind term is every
# row's one instance of its kind's word in the kind column (C).
SCORED_SQL = (
    "WITH t AS MATERIALIZED (SELECT t.lexeme, t.idf, t.wanted FROM unnest(CAST(? AS TEXT[]), CAST(? AS FLOAT8[]), "
    "CAST(? AS BOOLEAN[])) AS t(lexeme, idf, wanted)), "
    "w AS MATERIALIZED (SELECT CAST(? AS FLOAT8[]) AS w, CAST(? AS FLOAT8) AS avgdl, CAST(? AS FLOAT8) AS kidf), "
    "s AS MATERIALIZED (SELECT p.seq, p.kind, SUM(t.idf * ((f.f * {k1_1}) / (f.f + f.norm))) "
    "+ MAX(w.kidf * ((w.w[3] * {k1_1}) / (w.w[3] + f.norm))) AS score "
    "FROM t JOIN {tf} p ON p.lexeme = t.lexeme{kind}, w, LATERAL (SELECT CAST(p.a AS FLOAT8) * w.w[1] + p.b * w.w[2] "
    "+ p.c * w.w[3] + p.d * w.w[4] AS f, {k1} * ({one_b} + {b} * p.len / w.avgdl) AS norm) f "
    "GROUP BY p.seq, p.kind HAVING COUNT(*) FILTER (WHERE t.wanted) >= ?), "
    "cut AS (SELECT s.score FROM s ORDER BY s.score DESC OFFSET ? LIMIT 1) "
    "SELECT r.seq AS seq, r.kind AS kind, r.expires_at AS expires_at, r.len AS len, ARRAY_AGG(q.lexeme) AS lexemes, "
    "ARRAY_AGG(q.a) AS a, ARRAY_AGG(q.b) AS b, ARRAY_AGG(q.c) AS c, ARRAY_AGG(q.d) AS d "
    "FROM s JOIN {name} r ON r.seq = s.seq JOIN {tf} q ON q.lexeme = ANY(CAST(? AS TEXT[])) AND q.kind = s.kind "
    "AND q.seq = s.seq WHERE s.score >= COALESCE((SELECT cut.score FROM cut), 0.0) * (1 - 1e-9) - 1e-12 GROUP BY r.seq"
).replace("{k1_1}", repr(bm25.K1 + 1.0)).replace("{k1}", repr(bm25.K1)).replace("{one_b}", repr(1 - bm25.B)).replace(
    "{b}", repr(bm25.B))
# The rows holding each phrase of several lexemes that `SEARCH_SQL` did not
# see as one (a single token PostgreSQL stems into two lexemes).
PHRASE_COUNT_SQL = (
    "SELECT t.i AS i, c.n AS n, c.k AS k FROM unnest(CAST(? AS TEXT[])) WITH ORDINALITY AS t(q, i), LATERAL ("
    "SELECT COUNT(*) AS n, COUNT(*) FILTER (WHERE r.kind = ?) AS k FROM {name} r WHERE r.tsv @@ CAST(t.q AS tsquery)) c"
)


def _terms(phrases: Sequence[Phrase], stems: dict[str, tuple[str, ...]]) -> list[bm25.Term | None]:
    """Each phrase as a BM25 term (None: a token of it has no stem, so it
    matches nothing)."""
    out: list[bm25.Term | None] = []
    for phrase in phrases:
        lexemes: list[str] = []
        for token in bm25.tokens(phrase.text):
            lexemes.extend(stems.get(token, ()))
        out.append(bm25.Term(tuple(lexemes)) if lexemes else None)
    return out


def _row(record: dict[str, Any]) -> bm25.Row:
    positions: dict[str, dict[int, str]] = {}
    for lexeme, where, columns in zip(record["lexemes"], record["positions"], record["columns"]):
        positions[lexeme] = dict(zip((int(p) for p in where.split()), columns))
    expires = record["expires_at"]
    return bm25.Row(int(record["seq"]), str(record["kind"]), int(record["len"] or 0), positions,
                    None if expires is None else float(expires))


def _counted_row(record: dict[str, Any]) -> bm25.Row:
    """A row read from its postings: each lexeme's instances per column,
    given made-up positions in the column order A-D.  That is enough for
    terms of one lexeme (their only reader here: `bm25.instances` counts
    them and sums their column weights), and in the vector's own order (its
    columns are concatenated A to D), so the weights add up in the same
    order, to the same last bit, as from the real positions."""
    positions: dict[str, dict[int, str]] = {}
    for lexeme, *per_column in zip(record["lexemes"], record["a"], record["b"], record["c"], record["d"]):
        positions[lexeme] = dict(enumerate("".join(column * int(n) for column, n in zip("ABCD", per_column))))
    expires = record["expires_at"]
    return bm25.Row(int(record["seq"]), str(record["kind"]), int(record["len"] or 0), positions,
                    None if expires is None else float(expires))


# fetch(terms, every, scored, limit): the rows (of the kind asked for)
# holding any (every) one of `terms`; at least those of the best `limit` by
# the BM25 of `scored`, or all of them.
Fetch = Callable[[Sequence[bm25.Term], bool, Sequence[bm25.Term], int], Awaitable[list[bm25.Row]]]


async def big_ranking(
    plan: QueryPlan,
    terms: Sequence[bm25.Term | None],
    kind_term: bm25.Term | None,
    counts: dict[str, int],
    hits: dict[bm25.Term, int],
    table_rows: int,
    table_tokens: int,
    weights: dict[str, float],
    wanted: int,
    fetch: Fetch,
) -> list[tuple[int, float]]:
    """What `SqliteFtsIndex._ranked` returns for a project too big to read
    whole, best first, from the inputs FTS5 itself uses: `counts`, each
    phrase's rows (of the kind asked for, if any; capped at COMMON_ROWS + 1
    as SQLite caps them), `hits`, each term's rows in the whole table (its
    IDF; the kind term's are the kind's rows), the table's rows and tokens.
    `fetch` gives the rows (of the kind asked for) holding any, or every,
    one of the terms (a superset will do: a row holding none is dropped
    here; and of those, any that hold the best `limit`); only the phrases
    SQLite's pruning keeps are fetched."""
    weight = max(1, plan.original_weight)
    pairs = list(zip(plan.phrases, terms))
    by_text = {p.text: t for p, t in pairs}
    head = [kind_term] if kind_term is not None else []

    def present(phrases: Sequence[Phrase]) -> list[bm25.Term]:
        return [t for t in (by_text[p.text] for p in phrases) if t is not None]

    async def ranked(
        phrase_terms: list[bm25.Term], limit: int, every: bool = False, scored: list[bm25.Term] | None = None
    ) -> list[tuple[int, float]]:
        """BM25 of `scored` (default: the kind term and `phrase_terms`) over
        the rows holding any (every) one of `phrase_terms`, the best `limit`."""
        if not phrase_terms:
            return []
        wanted_terms = set(phrase_terms)
        frequencies: dict[int, dict[bm25.Term, float]] = {}
        holding = []
        for row in await fetch(phrase_terms, every, scored or head + phrase_terms, limit):
            weighted: dict[bm25.Term, float] = {}
            for term in wanted_terms | set(head):
                count, f = bm25.instances(term, row, weights)
                if count:
                    weighted[term] = f
            held = wanted_terms.intersection(weighted)
            if held == wanted_terms if every else held:
                holding.append(row)
                frequencies[row.seq] = weighted
        found = bm25.scores(scored or head + phrase_terms, holding, frequencies, table_rows, table_tokens, hits)
        return sorted(found.items(), key=lambda item: (-item[1], item[0]))[:limit]

    everything = 0
    if table_rows > wanted:
        everything = sum(counts.get(p.text, 0) for p in plan.phrases)
        if not everything:
            return []
    if table_rows <= wanted or everything <= wanted:
        # Every matching row fits in one answer: one ranking, the agent's
        # words repeated original_weight times, divided by that weight.
        whole = head + [t for p, t in pairs if t is not None for _ in range(weight if not p.expansion else 1)]
        best = await ranked([t for _, t in pairs if t is not None], wanted, scored=whole)
        return [(seq, score / weight) for seq, score in best]
    pruned = Pruned(plan.originals, plan.expansions, False)
    if max(counts.values()) > COMMON_ROWS:
        pruned = prune(plan, counts)
    originals = await ranked(present(pruned.originals), wanted, pruned.require_all)
    if pruned.require_all and len(originals) < wanted:
        originals = await ranked(present(pruned.originals), wanted)  # too few rows hold every word: any of them
    expansions = await ranked(present(pruned.expansions), wanted) if pruned.expansions else []
    fused = fuse(originals, expansions, weight)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


# An entry's index row, its counts and its postings, in one statement: the
# row (nothing if it is there already: `add` then takes the old one out
# first), the project's size row (locked first, so the writers of one
# project's counts take their turns and never deadlock over its lexemes),
# then one count per distinct lexeme of the row and its kind, in the
# lexemes' order, and the row's postings.
ADD_SQL = (
    "WITH new AS (INSERT INTO {name} (seq, kind, expires_at, tsv) VALUES (?, ?, ?, " + VECTOR + ") "
    "ON CONFLICT (seq) DO NOTHING RETURNING seq, kind, tsv, len), "
    f"size AS (UPDATE {SIZES} s SET rows = s.rows + 1, tokens = s.tokens + new.len FROM new "
    "WHERE s.project_id = ? RETURNING s.rows), "
    "df AS (INSERT INTO {df} AS d (lexeme, kind, rows) SELECT u.lexeme, new.kind, 1 FROM size, new, "
    "unnest(tsvector_to_array(new.tsv)) u(lexeme) ORDER BY u.lexeme "
    "ON CONFLICT (lexeme, kind) DO UPDATE SET rows = d.rows + 1 RETURNING 1), "
    f"tf AS ({POSTINGS}) "
    "SELECT (SELECT COUNT(*) FROM size) AS added, (SELECT COUNT(*) FROM df) AS lexemes"
)
# Taking a row out: the row, its postings and the project's size row (its
# lock, as above) in one statement, which returns the row's lexemes ...
REMOVE_SQL = (
    "WITH old AS (DELETE FROM {name} WHERE seq = ? RETURNING seq, kind, tsv, len), "
    "tf AS (DELETE FROM {tf} p USING old WHERE p.lexeme = ANY(tsvector_to_array(old.tsv)) "
    "AND p.kind = old.kind AND p.seq = old.seq RETURNING 1), "
    f"size AS (UPDATE {SIZES} s SET rows = s.rows - 1, tokens = s.tokens - old.len FROM old "
    "WHERE s.project_id = ? RETURNING s.rows) "
    "SELECT old.kind AS kind, tsvector_to_array(old.tsv) AS lexemes, (SELECT COUNT(*) FROM tf) AS postings FROM old, size"
)
# ... then their counts, less one (a count of one goes), in a statement of
# its own: it starts after the size row's lock was taken, so no other writer
# of the project's counts runs between its snapshot and its changes.
UNCOUNT_SQL = (
    "WITH l AS (SELECT unnest(CAST(? AS TEXT[])) AS lexeme), "
    "gone AS (DELETE FROM {df} d USING l WHERE d.lexeme = l.lexeme AND d.kind = ? AND d.rows <= 1 RETURNING 1), "
    "less AS (UPDATE {df} d SET rows = d.rows - 1 FROM l WHERE d.lexeme = l.lexeme AND d.kind = ? AND d.rows > 1 "
    "RETURNING 1) SELECT (SELECT COUNT(*) FROM gone) AS gone, (SELECT COUNT(*) FROM less) AS less"
)


class PostgresFtsIndex:
    def __init__(self, tx: Any) -> None:
        self.tx = tx

    async def create_project(self, project_id: int) -> None:
        name = table(project_id)
        # kind and expires_at are copied from the entry (neither changes while
        # it is trusted), so a search reads this table alone.
        await self.tx.run(
            f"CREATE TABLE IF NOT EXISTS {name} "
            "(seq BIGINT PRIMARY KEY, kind TEXT NOT NULL, expires_at DOUBLE PRECISION, tsv tsvector NOT NULL, "
            f"len INTEGER GENERATED ALWAYS AS ({TOKENS_FUNCTION}(tsv)) STORED)"
        )
        await self.tx.run(f"CREATE INDEX IF NOT EXISTS {name}_tsv ON {name} USING gin (tsv)")
        await self.tx.run(
            f"CREATE TABLE IF NOT EXISTS {df_table(project_id)} "
            "(lexeme TEXT NOT NULL, kind TEXT NOT NULL, rows INTEGER NOT NULL, PRIMARY KEY (lexeme, kind))"
        )
        # Keyed by lexeme and kind, so a list's postings (of the kind asked
        # for) are one range of the key; the rest INCLUDEd, so a search reads
        # the index alone (an index-only scan, once VACUUM has seen the pages).
        await self.tx.run(
            f"CREATE TABLE IF NOT EXISTS {tf_table(project_id)} "
            "(lexeme TEXT NOT NULL, kind TEXT NOT NULL, seq BIGINT NOT NULL, a SMALLINT NOT NULL, b SMALLINT NOT NULL, "
            "c SMALLINT NOT NULL, d SMALLINT NOT NULL, len INTEGER NOT NULL, "
            "PRIMARY KEY (lexeme, kind, seq) INCLUDE (a, b, c, d, len))"
        )
        await self.tx.run(
            f"INSERT INTO {SIZES} (project_id, rows, tokens) VALUES (?, 0, 0) ON CONFLICT (project_id) DO NOTHING",
            project_id,
        )

    async def add(self, entry: Entry) -> None:
        sql = ADD_SQL.format(name=table(entry.project_id), df=df_table(entry.project_id), tf=tf_table(entry.project_id))
        args = (entry.seq, entry.kind, entry.expires_at, *_columns(entry.statement, entry.evidence, entry.kind), entry.project_id)
        row = await self.tx.one(sql, *args)
        if row is not None and int(row["added"]):
            return
        # Indexed already (a re-add): its old counts out, then the new row in.
        await self.remove(entry)
        row = await self.tx.one(sql, *args)
        assert row is not None and int(row["added"]), "the recall index of the project is missing its size row"

    async def add_many(self, project_id: int, rows: Sequence[tuple[int, str, float | None, str, str | None]]) -> None:
        await add_many(self.tx, project_id, rows)

    async def remove(self, entry: Entry) -> None:
        sql = REMOVE_SQL.format(name=table(entry.project_id), tf=tf_table(entry.project_id))
        old = await self.tx.one(sql, entry.seq, entry.project_id)
        if old is None:
            return  # not indexed
        sql = UNCOUNT_SQL.format(df=df_table(entry.project_id))
        await self.tx.one(sql, list(old["lexemes"] or ()), old["kind"], old["kind"])

    async def set_expiry(self, entry: Entry) -> None:
        """The copy of the expiry that a search reads beside the row."""
        await self.tx.run(f"UPDATE {table(entry.project_id)} SET expires_at = ? WHERE seq = ?", entry.expires_at, entry.seq)

    async def supported(self, entry: Entry) -> None:
        """Nothing: no process keeps PostgreSQL's entries between searches."""

    async def entries(
        self, project_id: int, seqs: list[int], fetch: Callable[[list[int]], Awaitable[dict[int, Entry]]]
    ) -> dict[int, Entry]:
        return await fetch(seqs)

    async def search(
        self,
        project_id: int,
        query: str,
        kind: str | None,
        limit: int,
        now: float,
        *,
        ranking: Ranking | None = None,
    ) -> list[tuple[int, float]]:
        ranking = ranking or DEFAULT_RANKING
        plan = plan_query(query, ranking)
        phrases = tuple(p for p in plan.phrases if lexeme(p.text, p.prefix) is not None)
        if not phrases:
            return []
        # A few more candidates than asked, as on SQLite, so the kind-hint
        # boost can lift an entry ranked just below the cut.
        wanted = max(limit, min(ranking.candidates, limit * 3))
        if any(p.prefix for p in phrases):
            # Not recall's ranking (`Ranking.prefix`): ranked by ts_rank.
            found = await prefix_ranking(self.tx, table(project_id), plan, phrases, ranking, kind, wanted, now)
        else:
            found = await self._exact(project_id, plan, phrases, ranking, kind, limit, wanted, now)
        return rerank(found, plan, ranking, limit)

    async def _exact(
        self, project_id: int, plan: QueryPlan, phrases: tuple[Phrase, ...], ranking: Ranking, kind: str | None,
        limit: int, wanted: int, now: float,
    ) -> list[Candidate]:
        """The project ranked as SQLite ranks it (FTS5's bm25): a table of at
        most `CANDIDATE_ROWS` rows read whole in one statement
        (`exact_ranking`), a bigger one from its counts and the rows of the
        phrases SQLite's pruning keeps (`big_ranking`)."""
        name = table(project_id)
        words = sorted({t for p in phrases for t in bm25.tokens(p.text)} | ({kind} if kind else set()))
        query = " | ".join(q for q in (lexeme(p.text, False) for p in phrases) if q is not None)
        multi = [p.text for p in phrases if len(bm25.tokens(p.text)) > 1]
        sql = SEARCH_SQL.format(name=name, df=df_table(project_id), rows=CANDIDATE_ROWS)
        records = await self.tx.all(
            sql, [bm25.document(w) for w in words], query, project_id, [phrase_query(m) for m in multi], kind
        )
        size = next((r for r in records if r["n"] is not None and r["p"] is None), None)
        if size is None or not int(size["n"]):
            return []
        table_rows, table_tokens = int(size["n"]), int(size["total"])
        stems = {words[int(r["i"]) - 1]: tuple(r["lexemes"] or ()) for r in records if r["i"] is not None}
        df: dict[tuple[str, str], int] = {
            (str(r["lexemes"][0]), str(r["kind"])): int(r["df"]) for r in records if r["df"] is not None
        }
        plan = replace(plan, phrases=phrases)
        terms = _terms(phrases, stems)
        kind_term = bm25.Term(stems[kind][:1], "C") if kind and stems.get(kind) else None
        # Every row of a kind holds that kind's word (its kind column).
        kind_rows = df.get((kind_term.lexemes[0], kind), 0) if kind_term is not None and kind else 0
        weights = column_weights(ranking)
        seen: dict[int, bm25.Row] = {}
        rank: Callable[[int], Awaitable[list[tuple[int, float]]]]
        if table_rows <= CANDIDATE_ROWS:
            rows = [_row(r) for r in records if r["seq"] is not None]
            if not rows:
                return []
            seen = {r.seq: r for r in rows}
            args = (plan, terms, kind, kind_term, rows, table_rows, table_tokens, kind_rows, weights)

            async def small(wanted: int) -> list[tuple[int, float]]:
                return exact_ranking(*args, wanted)

            rank = small
        else:
            counted = {str(multi[int(r["p"]) - 1]): (int(r["n"]), int(r["total"])) for r in records if r["p"] is not None}
            rank = await self._big(project_id, plan, terms, kind, kind_term, kind_rows, df, counted,
                                   table_rows, table_tokens, weights, seen)

        def live(seq: int) -> bool:
            expires = seen[seq].expires_at
            return expires is None or expires > now

        # As SQLite does: expired entries leave recall at once but the index
        # only at the sweep; if they crowded the top, look further down once.
        for attempt in range(2):
            hits = await rank(wanted)
            found = [(seq, score) for seq, score in hits if live(seq)]
            if len(found) >= min(limit, len(hits)) or len(hits) < wanted or attempt:
                break
            wanted *= 8
        return [Candidate(seq, score, seen[seq].kind) for seq, score in found]

    async def _big(
        self, project_id: int, plan: QueryPlan, terms: list[bm25.Term | None], kind: str | None,
        kind_term: bm25.Term | None, kind_rows: int, df: dict[tuple[str, str], int],
        counted: dict[str, tuple[int, int]], table_rows: int, table_tokens: int, weights: dict[str, float],
        seen: dict[int, bm25.Row],
    ) -> Callable[[int], Awaitable[list[tuple[int, float]]]]:
        """`big_ranking` with this project's inputs: each term's rows from the
        counts (a term of several lexemes counted by `SEARCH_SQL`, or here),
        and a `fetch` that reads the rows of the terms it is asked for once
        (into `seen`)."""
        name = table(project_id)
        table_hits: dict[bm25.Term, int] = {}
        scoped: dict[bm25.Term, int] = {}
        uncounted: list[bm25.Term] = []
        for phrase, term in zip(plan.phrases, terms):
            if term is None or term in table_hits:
                continue
            if len(term.lexemes) == 1:
                (lex,) = term.lexemes
                table_hits[term] = sum(n for (l, _), n in df.items() if l == lex)
                scoped[term] = df.get((lex, kind), 0) if kind else table_hits[term]
            elif phrase.text in counted:
                table_hits[term], k = counted[phrase.text]
                scoped[term] = k if kind else table_hits[term]
            else:
                uncounted.append(term)
        if uncounted:  # a token stemmed into several lexemes: counted now
            sql = PHRASE_COUNT_SQL.format(name=name)
            for r in await self.tx.all(sql, [term_query(t, columns=True) for t in uncounted], kind):
                term = uncounted[int(r["i"]) - 1]
                table_hits[term] = int(r["n"])
                scoped[term] = int(r["k"]) if kind else int(r["n"])
        if kind_term is not None:
            table_hits[kind_term] = kind_rows
        counts = {p.text: min(scoped[t], COMMON_ROWS + 1) if t is not None else 0 for p, t in zip(plan.phrases, terms)}
        fetched: dict[tuple[Any, ...], list[bm25.Row]] = {}
        kind_filter = " AND r.kind = ?" if kind else ""
        sql = ROWS_SQL.format(name=name, kind=kind_filter)
        head = list(kind_term.lexemes) if kind_term is not None else []

        scored_sql = SCORED_SQL.format(name=name, tf=tf_table(project_id), kind=" AND p.kind = ?" if kind else "")
        weight_list = [weights.get(c, 1.0) for c in "ABCD"]
        avgdl = table_tokens / table_rows if table_rows else 1.0

        async def fetch(
            wanted_terms: Sequence[bm25.Term], every: bool, scored: Sequence[bm25.Term], limit: int
        ) -> list[bm25.Row]:
            # From the postings when every term is of one lexeme and the only
            # term of a column is the kind's (phrases need positions).
            single = all(len(t.lexemes) == 1 and (t.column is None or t == kind_term) for t in (*wanted_terms, *scored))
            key = (frozenset(wanted_terms), every, tuple(scored) if single else (), limit if single else 0)
            if key not in fetched:
                unique = sorted(key[0], key=lambda t: t.lexemes)
                lexemes = sorted({lex for t in unique for lex in t.lexemes} | set(head))
                if single:
                    # The server's BM25 cuts the rows to the list's best first.
                    idf: dict[str, float] = {t.lexemes[0]: 0.0 for t in unique}
                    kind_idf = 0.0
                    for t in scored:
                        if t.column is None:
                            idf[t.lexemes[0]] = idf.get(t.lexemes[0], 0.0) + bm25.idf(table_rows, table_hits.get(t, 0))
                        else:
                            kind_idf += bm25.idf(table_rows, table_hits.get(t, 0))
                    listed = sorted(idf)
                    wanted_lexemes = {t.lexemes[0] for t in unique}
                    records = await self.tx.all(
                        scored_sql, listed, [idf[lex] for lex in listed], [lex in wanted_lexemes for lex in listed],
                        weight_list, avgdl, kind_idf, *([kind] if kind else []), len(wanted_lexemes) if every else 1,
                        max(0, limit - 1), lexemes,
                    )
                    rows = [_counted_row(r) for r in records]
                else:
                    query = (" & " if every else " | ").join(term_query(t) for t in unique)
                    records = await self.tx.all(sql, query, lexemes, *([kind] if kind else []))
                    rows = [_row(r) for r in records]
                for row in rows:
                    seen.setdefault(row.seq, row)
                fetched[key] = rows
            return fetched[key]

        async def rank(wanted: int) -> list[tuple[int, float]]:
            return await big_ranking(plan, terms, kind_term, counts, table_hits, table_rows, table_tokens,
                                     weights, wanted, fetch)

        return rank
