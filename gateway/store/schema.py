"""The schema, as forward migrations shared by both backends.

Types are written as `{ID}` (auto-increment key), `{REAL}`, `{INT}`, `{TEXT}`,
`{BLOB}` and expanded per dialect.  Every moment is a float of epoch seconds.
A new version is appended; a released one changes only where the store it
leaves, from any older version, stays the same.

A statement is run on both backends unless it is given as `Only(dialect,
sql)`: where the store itself differs by backend (`Dialect.recall_counters`),
so does its schema.  `for_dialect` is how a driver reads a migration.
"""

from __future__ import annotations

from typing import NamedTuple


class Only(NamedTuple):
    dialect: str
    sql: str


Statement = str | Only

DIALECT_TYPES = {
    "sqlite": {"ID": "INTEGER PRIMARY KEY", "REAL": "REAL", "INT": "INTEGER", "TEXT": "TEXT", "BLOB": "BLOB"},
    "postgres": {
        "ID": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "REAL": "DOUBLE PRECISION",
        "INT": "BIGINT",
        "TEXT": "TEXT",
        "BLOB": "BYTEA",
    },
}

# Created before anything else, to read the version from (a driver runs it
# on its own first).
META_TABLE = """CREATE TABLE IF NOT EXISTS meta (key {TEXT} PRIMARY KEY, value {TEXT} NOT NULL)"""
SET_META = "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"

MIGRATIONS: list[tuple[int, list[Statement]]] = [
    (
        1,
        [
            META_TABLE,
            """CREATE TABLE projects (
                id {ID},
                slug {TEXT} NOT NULL UNIQUE,
                created_at {REAL} NOT NULL,
                k_distinct_issuers {INT} NOT NULL,
                window_days {REAL} NOT NULL,
                playbook_min_trusted {INT} NOT NULL,
                playbook_top_n {INT} NOT NULL,
                demotions_per_hour {INT} NOT NULL,
                playbook {TEXT} NOT NULL DEFAULT ''
            )""",
            """CREATE TABLE tokens (
                id {ID},
                project_id {INT} NOT NULL REFERENCES projects(id),
                principal {TEXT} NOT NULL,
                level {TEXT} NOT NULL,
                token_hash {TEXT} NOT NULL UNIQUE,
                created_at {REAL} NOT NULL,
                revoked_at {REAL}
            )""",
            "CREATE INDEX tokens_principal ON tokens(project_id, principal)",
            """CREATE TABLE entries (
                seq {ID},
                id {TEXT} NOT NULL UNIQUE,
                project_id {INT} NOT NULL REFERENCES projects(id),
                kind {TEXT} NOT NULL,
                statement {TEXT} NOT NULL,
                evidence {TEXT},
                norm_statement {TEXT} NOT NULL,
                state {TEXT} NOT NULL,
                created_at {REAL} NOT NULL,
                created_by {TEXT} NOT NULL,
                created_via {TEXT} NOT NULL,
                expires_at {REAL},
                promoted_at {REAL},
                promoted_by {TEXT},
                provenance {TEXT}
            )""",
            "CREATE INDEX entries_project_seq ON entries(project_id, seq)",
            "CREATE INDEX entries_project_state ON entries(project_id, state, seq)",
            "CREATE INDEX entries_project_norm ON entries(project_id, norm_statement)",
            "CREATE INDEX entries_project_author ON entries(project_id, created_by, seq)",
            "CREATE INDEX entries_project_author_time ON entries(project_id, created_by, created_at)",
            """CREATE TABLE supports (
                id {ID},
                entry_seq {INT} NOT NULL REFERENCES entries(seq),
                issuer {TEXT} NOT NULL,
                source {TEXT} NOT NULL,
                attestation_id {TEXT},
                at {REAL} NOT NULL,
                UNIQUE (entry_seq, issuer, source)
            )""",
            """CREATE TABLE contradictions (
                id {ID},
                entry_seq {INT} NOT NULL REFERENCES entries(seq),
                project_id {INT} NOT NULL,
                by_principal {TEXT} NOT NULL,
                detail {TEXT},
                at {REAL} NOT NULL,
                until {REAL} NOT NULL
            )""",
            "CREATE INDEX contradictions_entry ON contradictions(entry_seq)",
            "CREATE INDEX contradictions_principal ON contradictions(project_id, by_principal, at)",
            """CREATE TABLE audit (
                id {ID},
                project_id {INT} NOT NULL,
                at {REAL} NOT NULL,
                action {TEXT} NOT NULL,
                entry_id {TEXT},
                actor {TEXT} NOT NULL,
                detail {TEXT}
            )""",
            "CREATE INDEX audit_project ON audit(project_id, id)",
            "CREATE INDEX audit_entry ON audit(project_id, entry_id, id)",
            """CREATE TABLE rate_limit_marks (
                project_id {INT} NOT NULL,
                principal {TEXT} NOT NULL,
                kind {TEXT} NOT NULL,
                hour {INT} NOT NULL,
                PRIMARY KEY (project_id, principal, kind, hour)
            )""",
            """CREATE TABLE events (
                seq {ID},
                id {TEXT} NOT NULL UNIQUE,
                project_id {INT} NOT NULL,
                principal {TEXT} NOT NULL,
                type {TEXT} NOT NULL,
                detail {TEXT},
                effect {TEXT} NOT NULL,
                at {REAL} NOT NULL
            )""",
            "CREATE INDEX events_principal_time ON events(project_id, principal, at)",
            """CREATE TABLE recalls (
                seq {ID},
                id {TEXT} NOT NULL UNIQUE,
                project_id {INT} NOT NULL,
                principal {TEXT} NOT NULL,
                query {TEXT} NOT NULL,
                kind {TEXT},
                via {TEXT} NOT NULL,
                returned {INT} NOT NULL,
                at {REAL} NOT NULL
            )""",
            "CREATE INDEX recalls_project_at ON recalls(project_id, at)",
            """CREATE TABLE recall_results (
                recall_seq {INT} NOT NULL,
                entry_seq {INT} NOT NULL,
                rank {INT} NOT NULL,
                score {REAL} NOT NULL,
                PRIMARY KEY (recall_seq, entry_seq)
            )""",
            "CREATE INDEX recall_results_entry ON recall_results(entry_seq)",
            """CREATE TABLE recall_uses (
                recall_seq {INT} NOT NULL,
                entry_seq {INT} NOT NULL,
                project_id {INT} NOT NULL,
                at {REAL} NOT NULL,
                PRIMARY KEY (recall_seq, entry_seq)
            )""",
            "CREATE INDEX recall_uses_entry ON recall_uses(entry_seq)",
            "CREATE INDEX recall_uses_project_at ON recall_uses(project_id, at)",
            """CREATE TABLE attestations (
                seq {ID},
                id {TEXT} NOT NULL UNIQUE,
                project_id {INT} NOT NULL,
                issuer {TEXT} NOT NULL,
                check_name {TEXT} NOT NULL,
                outcome {TEXT} NOT NULL,
                counted {INT} NOT NULL,
                reason {TEXT},
                provenance {TEXT},
                run_url {TEXT},
                at {REAL} NOT NULL
            )""",
            "CREATE INDEX attestations_project_check ON attestations(project_id, check_name)",
            """CREATE TABLE seen_tokens (
                issuer {TEXT} NOT NULL,
                jti {TEXT} NOT NULL,
                expires_at {REAL} NOT NULL,
                PRIMARY KEY (issuer, jti)
            )""",
            """CREATE TABLE webhook_deliveries (
                source {TEXT} NOT NULL,
                delivery_key {TEXT} NOT NULL,
                at {REAL} NOT NULL,
                PRIMARY KEY (source, delivery_key)
            )""",
            """CREATE TABLE jwks_refreshes (
                issuer {TEXT} PRIMARY KEY,
                at {REAL} NOT NULL
            )""",
            """CREATE TABLE proposals (
                seq {ID},
                id {TEXT} NOT NULL UNIQUE,
                project_id {INT} NOT NULL,
                kind {TEXT} NOT NULL,
                statement {TEXT} NOT NULL,
                rationale {TEXT},
                proposed_by {TEXT} NOT NULL,
                state {TEXT} NOT NULL,
                created_at {REAL} NOT NULL,
                decided_at {REAL},
                decided_by {TEXT},
                reason {TEXT},
                entry_id {TEXT}
            )""",
            "CREATE INDEX proposals_project ON proposals(project_id, seq)",
            """CREATE TABLE thread_messages (
                seq {ID},
                id {TEXT} NOT NULL UNIQUE,
                project_id {INT} NOT NULL,
                thread_id {TEXT} NOT NULL,
                author {TEXT} NOT NULL,
                text {TEXT} NOT NULL,
                posted_by {TEXT} NOT NULL,
                at {REAL} NOT NULL
            )""",
            "CREATE INDEX thread_messages_poster_time ON thread_messages(project_id, posted_by, at)",
        ],
    ),
    (
        2,
        [
            # Dashboard sessions, kept on the server so that signing out ends one
            # for every process (docs/dashboard.md).  Only the hash of the session id is
            # stored: a read of this table does not yield a usable cookie.
            """CREATE TABLE dashboard_sessions (
                id {ID},
                session_hash {TEXT} NOT NULL UNIQUE,
                token_hash {TEXT} NOT NULL,
                created_at {REAL} NOT NULL,
                expires_at {REAL} NOT NULL,
                ended_at {REAL}
            )""",
            "CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions(expires_at)",
        ],
    ),
    (
        3,
        [
            # The per-principal hourly budgets (docs/security.md, Limits) count from these:
            # a principal's recalls (read budget) and proposals (candidate
            # budget), each one indexed range inside the request's transaction.
            # IF NOT EXISTS: a store rolled back to an older version number
            # (a test, or an operator's restore) may keep them.
            "CREATE INDEX IF NOT EXISTS recalls_principal_at ON recalls(project_id, principal, at)",
            "CREATE INDEX IF NOT EXISTS proposals_proposer_time ON proposals(project_id, proposed_by, created_at)",
        ],
    ),
    (
        4,
        [
            # Recall's vectors: a row exactly while its entry is trusted, written
            # by the trust move as a placeholder (model and vector NULL) that the
            # background fill completes; the table of versions 1 to 3 is dropped.
            "DROP TABLE IF EXISTS entry_vectors",
            """CREATE TABLE entry_vectors (
                id {ID},
                seq {INT} NOT NULL UNIQUE,
                project_id {INT} NOT NULL,
                model {TEXT},
                vector {BLOB}
            )""",
            "CREATE INDEX entry_vectors_model ON entry_vectors(project_id, model, id)",
            "CREATE INDEX entry_vectors_pending ON entry_vectors(model, id)",
            "INSERT INTO entry_vectors (seq, project_id) SELECT seq, project_id FROM entries WHERE state = 'trusted' ORDER BY seq",
        ],
    ),
    (
        5,
        [
            # SQLite: how many times each entry was returned, in place of the
            # index recall_results_entry (`Dialect.recall_counters` says why,
            # and why not on PostgreSQL); version 7 counts the rows into it.
            # entry_seq is the rowid, so the counters of a group of recalls
            # share a page or two.
            Only("sqlite", "CREATE TABLE IF NOT EXISTS recall_counts (entry_seq {INT} PRIMARY KEY, returned {INT} NOT NULL)"),
            Only("sqlite", "DROP INDEX IF EXISTS recall_results_entry"),
        ],
    ),
    (
        6,
        [
            # What the background sweep looks for, found by an index: a scan
            # of the table stalled SQLite's event loop (docs/decisions/0011).
            # Partial where the table holds rows the sweep never picks, so
            # writing those pays nothing; the condition is the sweep's own,
            # which is how SQLite sees that the index serves the query.
            "CREATE INDEX IF NOT EXISTS entries_expiring ON entries(expires_at) "
            "WHERE expires_at IS NOT NULL AND state IN ('candidate', 'trusted')",
            "CREATE INDEX IF NOT EXISTS seen_tokens_expiry ON seen_tokens(expires_at)",
            "CREATE INDEX IF NOT EXISTS webhook_ids_at ON webhook_deliveries(at) "
            "WHERE delivery_key LIKE 'webhook-id:%'",
        ],
    ),
    (
        7,
        [
            # SQLite: the recall counters are folded from the result rows
            # once every hundred recalls instead of bumped by each recall
            # (`gateway.store.queries.recalls.FOLD_RETURNED`); this row is
            # the last recall seq folded.  Counted afresh from the rows, so a
            # re-run (a store set back to an older version number, whose
            # gateway counted per recall or not at all) counts nothing twice.
            Only("sqlite", "CREATE TABLE IF NOT EXISTS recall_counts_folded "
                           "(one INTEGER PRIMARY KEY CHECK (one = 1), up_to INTEGER NOT NULL)"),
            Only("sqlite", "DELETE FROM recall_counts"),
            Only(
                "sqlite",
                "INSERT INTO recall_counts (entry_seq, returned) "
                "SELECT entry_seq, COUNT(*) FROM recall_results GROUP BY entry_seq",
            ),
            Only("sqlite", "INSERT OR REPLACE INTO recall_counts_folded (one, up_to) "
                           "SELECT 1, COALESCE(MAX(recall_seq), 0) FROM recall_results"),
        ],
    ),
    (
        8,
        [
            # Each project's recall generation (gateway/store/recall_index.py),
            # and its index's size for BM25 on PostgreSQL (0 on SQLite).
            "CREATE TABLE IF NOT EXISTS recall_index (project_id {INT} PRIMARY KEY, generation {INT} NOT NULL DEFAULT 0, "
            "rows {INT} NOT NULL DEFAULT 0, tokens {INT} NOT NULL DEFAULT 0)",
            "INSERT INTO recall_index (project_id) SELECT id FROM projects WHERE id NOT IN (SELECT project_id FROM recall_index)",
        ],
    ),
    (
        9,
        [
            # Check maps published by a project's repository (gateway/ci/publish.py):
            # every publication is a row, and a row's state says what became of
            # it.  At most one map in force and one pending per project, held by
            # the store itself.  Every process polls `checkmaps_generation` in
            # the meta table, rewritten with each change of a map in force.
            """CREATE TABLE IF NOT EXISTS published_checkmaps (
                id {ID},
                project_id {INT} NOT NULL REFERENCES projects(id),
                source {TEXT} NOT NULL,
                content {TEXT} NOT NULL,
                sha256 {TEXT} NOT NULL,
                state {TEXT} NOT NULL,
                published_at {REAL} NOT NULL,
                run {TEXT},
                decided_at {REAL},
                decided_by {TEXT}
            )""",
            "CREATE UNIQUE INDEX IF NOT EXISTS published_checkmaps_in_force ON published_checkmaps(project_id) "
            "WHERE state = 'in_force'",
            "CREATE UNIQUE INDEX IF NOT EXISTS published_checkmaps_pending ON published_checkmaps(project_id) "
            "WHERE state = 'pending'",
            "CREATE INDEX IF NOT EXISTS published_checkmaps_project ON published_checkmaps(project_id, id)",
        ],
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]


def expand(sql: str, dialect: str) -> str:
    return sql.format(**DIALECT_TYPES[dialect])


def upgrades(current: int, dialect: str) -> list[tuple[int, list[str]]]:
    """The migrations a store at version `current` still needs, as `dialect` runs them."""
    if current > LATEST_VERSION:
        raise RuntimeError(
            f"the database schema is version {current}, newer than this gateway ({LATEST_VERSION}); upgrade the gateway"
        )
    return [(version, for_dialect(statements, dialect)) for version, statements in MIGRATIONS if version > current]


def for_dialect(statements: list[Statement], dialect: str) -> list[str]:
    """A migration's statements as `dialect` runs them: expanded, and
    without those meant for the other dialect."""
    chosen = []
    for statement in statements:
        if isinstance(statement, Only):
            if statement.dialect not in DIALECT_TYPES:  # a misspelt name would skip it everywhere
                raise ValueError(f"a migration statement names no dialect: {statement.dialect!r}")
            if statement.dialect != dialect:
                continue
            statement = statement.sql
        chosen.append(expand(statement, dialect))
    return chosen
