"""Recall: query shaping (pure), safety for any input, ranking sanity for
questions phrased in other words, project isolation, kind filter, limits,
and the record every recall leaves."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.errors import Invalid
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from gateway.recall.search import (
    BASELINE,
    DEFAULT_RANKING,
    MAX_QUERY_CHARS,
    PREFIXED,
    fts5_expression,
    fts5_match,
    fuse,
    hinted_kinds,
    identifier_parts,
    plan_query,
    prune,
    terms,
)
from gateway.recall.vocabulary import synonyms_for
from tests.conftest import ProjectTokens, make_project
from tests.support.helpers import settle

HOSTILE = [
    "",
    "   ",
    '"',
    '""""',
    "'",
    "*",
    "a*",
    "NEAR(a b)",
    "a AND OR NOT b",
    "statement: x",
    "{statement evidence}: x",
    "^start",
    "-x",
    "col:*",
    "\x00",
    "a\x00b",
    "😀 🚀 ü ß İ",
    "ＳＱＬ",
    "' OR 1=1 --",
    "); DROP TABLE entries; --",
    "x" * MAX_QUERY_CHARS,
    "how do I " * 200,
    " ".join(f"w{i}" for i in range(400)),
]


# -- query shaping, pure ------------------------------------------------------------


def test_stop_words_are_dropped_unless_nothing_else_is_left() -> None:
    assert terms("How do I name a migration?") == ["name", "migration"]
    assert terms("how do I?") == ["how", "do", "i"]
    assert terms("") == []


def test_the_agents_own_words_outweigh_synonyms() -> None:
    plan = plan_query("rename the db table", DEFAULT_RANKING)
    weights = {p.text: p.weight for p in plan.phrases}
    assert weights["rename"] == DEFAULT_RANKING.original_weight
    assert weights["database"] == 1 and weights["name"] == 1  # expansions
    assert "the" not in weights


def test_prefix_matching_is_for_longer_words_and_off_by_default() -> None:
    ranking = PREFIXED
    phrases = {p.text: p.prefix for p in plan_query("config fmt", ranking).phrases}
    assert phrases["config"] is True and phrases["fmt"] is False
    assert fts5_match("config", ranking) == '"config"*'
    assert not any(p.prefix for p in plan_query("config fmt", DEFAULT_RANKING).phrases)


def test_prune_sets_aside_common_words_or_ands_them() -> None:
    plan = plan_query("rename the db table", DEFAULT_RANKING)
    pruned = prune(plan, {"rename": 3, "db": 5000, "table": 40, "database": 9000}, limit=2000)
    assert [p.text for p in pruned.originals] == ["rename", "table"] and not pruned.require_all
    assert "database" not in [p.text for p in pruned.expansions]
    every = prune(plan, {p.text: 9999 for p in plan.phrases}, limit=2000)
    assert every.require_all and every.originals == plan.originals and every.expansions == ()
    assert fts5_expression(every.originals, require_all=True) == '"rename" AND "db" AND "table"'
    # A word no entry holds brings no row: the common words still answer.
    typo = prune(plan, {"rename": 0, "db": 5000, "table": 9000}, limit=2000)
    assert [p.text for p in typo.originals] == ["db", "table"] and typo.require_all


def test_prune_keeps_the_rarest_words_within_the_row_budget() -> None:
    plan = plan_query("rename the db table column", DEFAULT_RANKING)
    counts = {"rename": 900, "db": 300, "table": 800, "column": 700}
    pruned = prune(plan, counts, limit=1000, budget=1800)
    assert [p.text for p in pruned.originals] == ["db", "table", "column"]  # 300 + 700 + 800 (not 900 more), in the question's order
    assert [p.text for p in prune(plan, counts, limit=1000, budget=100).originals] == ["db"]  # the rarest always


def test_fuse_is_the_sum_a_repeated_query_would_give() -> None:
    assert fuse([(1, 2.0), (2, 1.0)], [(2, 4.0), (3, 8.0)], 4) == {1: 2.0, 2: 2.0, 3: 2.0}


def test_the_baseline_ranking_is_plain_bm25_over_the_words() -> None:
    assert fts5_match("How do I name a migration?", BASELINE) == '"name" OR "migration"'


def test_kind_hints() -> None:
    assert hinted_kinds("any gotchas with the pooler?") == {"pitfall"}
    assert "decision" in hinted_kinds("why did we choose luxon")
    assert hinted_kinds("pooler") == frozenset()


def test_synonyms_skip_the_word_itself_and_its_plural() -> None:
    found = synonyms_for("tests")
    assert "pytest" in found and "tests" not in found and "test" not in found
    assert synonyms_for("zxqv") == ()


def test_identifier_parts() -> None:
    assert identifier_parts("Edit ConfigToml via HTTPClient and useApi") == "config toml http client use api"
    assert identifier_parts("snake_case and plain words") == ""


@pytest.fixture(scope="module")
def fts() -> sqlite3.Connection:
    """A real FTS5 table with the index's tokenizer, to run expressions on."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE f USING fts5(statement, evidence, kind, aliases, content='', "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.execute("INSERT INTO f(rowid, statement, evidence, kind, aliases) VALUES (1, 'Migrations are named by date', '', 'convention', '')")
    return conn


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_text_is_always_a_valid_expression(fts: sqlite3.Connection, query: str) -> None:
    match = fts5_match(query)
    if match is not None:
        fts.execute("SELECT rowid, bm25(f, 3, 1, 0.5, 1) FROM f WHERE f MATCH ?", (match,)).fetchall()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=MAX_QUERY_CHARS))
def test_any_text_is_a_valid_expression(fts: sqlite3.Connection, query: str) -> None:
    match = fts5_match(query)
    assert match is None or len(match) < 20_000
    if match is not None:
        fts.execute("SELECT rowid FROM f WHERE f MATCH ?", (match,)).fetchall()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list('"*^:(){}+-.,;\'\\ NEARORANDNOT\x00😀ab')), max_size=200))
def test_operator_soup_is_a_valid_expression(fts: sqlite3.Connection, query: str) -> None:
    match = fts5_match(query)
    if match is not None:
        fts.execute("SELECT rowid FROM f WHERE f MATCH ?", (match,)).fetchall()


# -- through the store ---------------------------------------------------------------


async def _trusted(hub: Hub, slug: str, items: list[tuple[str, str] | tuple[str, str, str]]) -> dict[str, str]:
    """Statements confirmed by the owner; returns statement -> entry id."""
    project = await hub.accounts.project(slug)
    owner = Principal(project=project, name="olivia", level="owner")
    ids = {}
    for item in items:
        kind, statement = item[0], item[1]
        evidence = item[2] if len(item) > 2 else None
        entry, _ = await hub.knowledge.learn(owner, kind, statement, evidence)
        await hub.knowledge.confirm(owner, entry.id)
        ids[statement] = entry.id
    return ids


async def _reader(hub: Hub, token: str) -> Principal:
    return await hub.accounts.authenticate(token)


FIXTURE_SET: list[tuple[str, str, str]] = [
    ("convention", "Migrations are named YYYYMMDD_description.sql.", "db/migrations/README"),
    ("pitfall", "The connection pooler cannot do prepared statements; disable them in the driver.", "pgbouncer"),
    ("decision", "We chose Luxon over Moment.js for date handling because Moment is mutable and heavy.", "ADR 10"),
    ("convention", "Run the formatter with make fmt before committing; CI rejects unformatted code.", "Makefile"),
    ("fact", "The development server listens on port 8001.", "settings.py"),
    ("convention", "Tests that need the network are marked @pytest.mark.network and skipped in the sandbox.", "conftest.py"),
    ("pitfall", "Never mutate environment variables inside a test; pass the settings in instead.", "review notes"),
    ("convention", "Release tags are plain versions without a leading v, like 1.4.2.", "release.yml"),
    ("decision", "All HTTP requests in tests are mocked with respx, never by patching the client.", "ADR 7"),
    ("fact", "Coverage below 100 percent fails the CI job even when every test passes.", "ci.yml"),
    ("convention", "New crates are prefixed with codex-, for example codex-core.", "Cargo.toml"),
    ("pitfall", "Building with --all-features fills target/ with gigabytes of artifacts.", "AGENTS.md"),
]

PARAPHRASES: list[tuple[str, str]] = [
    ("how do I name a migration?", "Migrations are named YYYYMMDD_description.sql."),
    ("any gotchas with pgbouncer and prepared statements?", "The connection pooler cannot do prepared statements; disable them in the driver."),
    ("why did we pick luxon for dates", "We chose Luxon over Moment.js for date handling because Moment is mutable and heavy."),
    ("which code formatter should I run", "Run the formatter with make fmt before committing; CI rejects unformatted code."),
    ("what port does the dev server use", "The development server listens on port 8001."),
    ("can I set an env var in a test?", "Never mutate environment variables inside a test; pass the settings in instead."),
    ("release tag format", "Release tags are plain versions without a leading v, like 1.4.2."),
    ("how to mock http calls in unit tests", "All HTTP requests in tests are mocked with respx, never by patching the client."),
    ("all tests pass but the pipeline is red", "Coverage below 100 percent fails the CI job even when every test passes."),
    ("what should I call a new rust crate", "New crates are prefixed with codex-, for example codex-core."),
    ("my disk fills up when I build all features", "Building with --all-features fills target/ with gigabytes of artifacts."),
]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_paraphrased_questions_find_the_right_entry_first(hub: Hub, acme: ProjectTokens) -> None:
    ids = await _trusted(hub, "acme", FIXTURE_SET)
    reader = await _reader(hub, acme.reader)
    wrong = []
    for question, statement in PARAPHRASES:
        _, results = await hub.recall.recall(reader, question)
        if not results or results[0][0].id != ids[statement]:
            wrong.append((question, [e.statement for e, _ in results[:2]]))
    assert wrong == []


@pytest.mark.parametrize("query", HOSTILE)
async def test_hostile_queries_never_fail_through_the_store(hub: Hub, acme: ProjectTokens, query: str) -> None:
    await _trusted(hub, "acme", [("fact", "Migrations are named by date.")])
    reader = await _reader(hub, acme.reader)
    recall_id, results = await hub.recall.recall(reader, query)
    assert recall_id and isinstance(results, list)


async def test_recall_is_isolated_per_project(hub: Hub, acme: ProjectTokens) -> None:
    await make_project(hub, "globex")
    ours = await _trusted(hub, "acme", [("fact", "Builds run on Bazel with remote caching.")])
    theirs = await _trusted(hub, "globex", [("fact", "Builds run on Bazel with remote caching."), ("fact", "Bazel caches live in S3.")])
    reader = await _reader(hub, acme.reader)
    _, results = await hub.recall.recall(reader, "bazel build cache")
    assert [e.id for e, _ in results] == list(ours.values())
    assert not {e.id for e, _ in results} & set(theirs.values())


async def test_only_trusted_entries_are_recalled(hub: Hub, acme: ProjectTokens) -> None:
    writer = await hub.accounts.authenticate(acme.writer)
    candidate, _ = await hub.knowledge.learn(writer, "fact", "Staging deploys happen at noon.")
    ids = await _trusted(hub, "acme", [("fact", "Production deploys happen at nine.")])
    refuted = await _trusted(hub, "acme", [("fact", "Hotfix deploys happen at any time.")])
    owner = await hub.accounts.authenticate(acme.owner)
    await hub.knowledge.refute(owner, refuted["Hotfix deploys happen at any time."], "not any more")
    for principal in (writer, await _reader(hub, acme.reader), owner):
        _, results = await hub.recall.recall(principal, "when do deploys happen")
        assert [e.id for e, _ in results] == list(ids.values())
    assert candidate.id not in [e.id for e, _ in results]


async def test_kind_filter_and_kind_hints(hub: Hub, acme: ProjectTokens) -> None:
    ids = await _trusted(
        hub,
        "acme",
        [
            ("convention", "Cache keys are prefixed with the service name."),
            ("pitfall", "Cache keys longer than 250 bytes are silently dropped by memcached."),
        ],
    )
    reader = await _reader(hub, acme.reader)
    _, only = await hub.recall.recall(reader, "cache keys", "pitfall")
    assert [e.kind for e, _ in only] == ["pitfall"]
    _, plain = await hub.recall.recall(reader, "cache keys")
    _, hinted = await hub.recall.recall(reader, "cache keys gotcha")
    assert [e.kind for e, _ in plain] == ["convention", "pitfall"]
    assert [e.kind for e, _ in hinted] == ["pitfall", "convention"]  # a hint reorders, it never hides
    with pytest.raises(Invalid):
        await hub.recall.recall(reader, "cache", "rumour")
    assert set(ids.values()) == {e.id for e, _ in hinted}


@pytest.mark.parametrize("limit", [0, 51, -1, True, "5", 2.5, None])
async def test_limit_out_of_bounds_is_refused(hub: Hub, acme: ProjectTokens, limit: Any) -> None:
    reader = await _reader(hub, acme.reader)
    with pytest.raises(Invalid):
        await hub.recall.recall(reader, "anything", None, limit)


async def test_limit_is_respected_and_every_recall_is_recorded(hub: Hub, acme: ProjectTokens) -> None:
    await _trusted(hub, "acme", [("fact", f"Service number {i} logs to stdout.") for i in range(60)])
    reader = await _reader(hub, acme.reader)
    for limit, expected in ((1, 1), (10, 10), (50, 50)):
        _, results = await hub.recall.recall(reader, "service logs", None, limit)
        assert len(results) == expected
    recall_id, results = await hub.recall.recall(reader, "service logs stdout", None, 3, via="mcp")
    project = reader.project
    await settle(hub)  # recall records are written without waiting for the disk
    rows = await hub.driver.read(
        lambda q: q.tx.all(
            "SELECT r.principal, r.query, r.via, r.returned, rr.entry_seq, rr.rank FROM recalls r "
            "JOIN recall_results rr ON rr.recall_seq = r.seq WHERE r.id = ? AND r.project_id = ? ORDER BY rr.rank",
            recall_id,
            project.id,
        )
    )
    assert [(r["principal"], r["query"], r["via"], r["returned"]) for r in rows] == [("reader-1", "service logs stdout", "mcp", 3)] * 3
    assert [r["entry_seq"] for r in rows] == [e.seq for e, _ in results]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_big_project_sets_common_words_aside_and_still_finds_the_rare_answer(hub: Hub, acme: ProjectTokens) -> None:
    """Past COMMON_ROWS matches the index prunes words that match thousands
    of rows; the entry holding the rare word must still come first, with
    and without a kind filter."""
    from gateway.recall.search import COMMON_ROWS, identifier_parts

    project = (await hub.accounts.project("acme"))
    now = hub.clock.now()
    count = COMMON_ROWS + 500

    async def bulk(q: Any) -> None:
        top = await q.tx.one("SELECT COALESCE(MAX(seq), 0) AS s FROM entries")
        first = int(top["s"]) + 1
        rows = [(f"Service {i} writes its deploy logs to stdout.", "fact" if i % 2 else "convention") for i in range(count)]
        await q.tx.run_many(
            "INSERT INTO entries (id, project_id, kind, statement, evidence, norm_statement, state, created_at, created_by, "
            "created_via, promoted_at, promoted_by) VALUES (?, ?, ?, ?, NULL, ?, 'trusted', ?, 'bulk-loader', 'learn', ?, 'owner:olivia')",
            [(f"kn_bulk_{i}", project.id, kind, s, s.casefold(), now, now) for i, (s, kind) in enumerate(rows)],
        )
        await q.index.add_many(project.id, [(first + i, kind, None, s, None) for i, (s, kind) in enumerate(rows)])

    await hub.driver.write(bulk)
    rare = await _trusted(hub, "acme", [("pitfall", "Deploy logs rotate at midnight and drop the last line.")])
    reader = await _reader(hub, acme.reader)
    for kind in (None, "pitfall"):
        _, results = await hub.recall.recall(reader, "why do deploy logs drop a line at midnight?", kind, 5)
        assert results[0][0].id == rare["Deploy logs rotate at midnight and drop the last line."]
    _, common_only = await hub.recall.recall(reader, "deploy logs stdout", None, 5)
    assert len(common_only) == 5 and all("stdout" in e.statement for e, _ in common_only)
    _, with_a_typo = await hub.recall.recall(reader, "deploy logs stdotu", None, 5)
    assert len(with_a_typo) == 5 and all("deploy logs" in e.statement for e, _ in with_a_typo)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_small_projects_one_query_ranks_as_the_two_fused_queries(hub: Hub, acme: ProjectTokens) -> None:
    """When every matching row fits in one answer, the index ranks with one
    query (the agent's words repeated); the scores must be those of the two
    queries `fuse` adds, whatever the question."""
    from gateway.recall.search import DEFAULT_RANKING, fts5_expression, fuse, plan_query
    from gateway.store.search_index import SqliteFtsIndex

    await _trusted(hub, "acme", FIXTURE_SET)
    project = await hub.accounts.project("acme")
    table = SqliteFtsIndex.table(project.id)
    r = DEFAULT_RANKING
    score = f"bm25({table}, {r.statement_weight!r}, {r.evidence_weight!r}, {r.kind_weight!r}, {r.aliases_weight!r})"
    sql = f"SELECT rowid AS seq, -{score} AS score FROM {table} WHERE {table} MATCH ? ORDER BY score DESC LIMIT 100"
    used_one_query = 0
    for question, _ in PARAPHRASES + [("how should I name the database migration when the test run fails in CI", "")]:
        plan = plan_query(question)

        async def both(q: Any) -> tuple[dict[int, float], dict[int, float]]:
            index = SqliteFtsIndex(q.tx)
            ours = await index._ranked(project.id, plan, None, 30, DEFAULT_RANKING)
            lists = []
            for phrases in (plan.originals, plan.expansions):
                expression = fts5_expression(phrases)
                rows = await q.tx.all(sql, expression) if expression else []
                lists.append([(int(x["seq"]), float(x["score"])) for x in rows])
            return ours, fuse(lists[0], lists[1], plan.original_weight)

        ours, reference = await hub.driver.read(both)
        used_one_query += len(reference) <= 30
        assert ours.keys() == reference.keys(), question
        for seq, value in reference.items():
            assert ours[seq] == pytest.approx(value, rel=1e-9), question
    assert used_one_query == len(PARAPHRASES) + 1  # the fixture set is small: every question took the one-query path


@pytest.mark.parametrize("big", [False, True], ids=["held", "packed"])
async def test_what_recall_shows_of_an_entry_follows_it_while_it_stays_trusted(
    hub: Hub, acme: ProjectTokens, backend: str, monkeypatch: pytest.MonkeyPatch, big: bool
) -> None:
    """On SQLite a reader keeps the entries a recall returned with the index's
    version (gateway.store.fts_counts): the same question asked again reads
    none of them (a small project's are the same objects; a big project's
    are kept packed, gateway.store.packed_entries, and unpacked as fresh
    objects no caller can change), and a change a recall shows (a new
    support, a new expiry) is in the very next answer on both stores."""
    from gateway.knowledge.model import Support
    from gateway.store import search_index
    from gateway.store.queries import Queries

    if big:
        monkeypatch.setattr(search_index, "HELD_ROWS", 0)
    ids = await _trusted(hub, "acme", [("fact", "Nightly builds publish to the staging bucket.")])
    entry_id = ids["Nightly builds publish to the staging bucket."]
    reader = await _reader(hub, acme.reader)
    fetched: list[list[int]] = []
    fetch = Queries.entries_by_seqs

    async def counted(self: Queries, seqs: list[int]) -> Any:
        fetched.append(list(seqs))
        return await fetch(self, seqs)

    monkeypatch.setattr(Queries, "entries_by_seqs", counted)

    async def shown() -> Any:
        _, results = await hub.recall.recall(reader, "where do nightly builds publish")
        assert [e.id for e, _ in results] == [entry_id]
        return results[0][0]

    first = await shown()
    assert first.supports == [] and first.expires_at is None
    again = await shown()
    if backend == "sqlite":
        assert len(fetched) == 1, "the second recall read its entry again"
        assert (again == first and again is not first) if big else again is first
    if big:
        first.supports.append(Support(issuer="forged", source="x", attestation_id=None, at=0.0))
        assert (await shown()).supports == [], "a caller's change reached the kept entry"
    project = await hub.accounts.project("acme")
    now = hub.clock.now()
    support = Support(issuer="oidc:ci.example.com:acme", source="nightly", attestation_id="at_1", at=now)
    outcome = await hub.driver.write(lambda q: hub.knowledge.apply_support(q, project, entry_id, support, now))
    assert outcome is not None and not outcome.duplicate
    supported = await shown()
    assert [s.issuer for s in supported.supports] == ["oidc:ci.example.com:acme"]
    owner = await hub.accounts.authenticate(acme.owner)
    await hub.knowledge.set_expiry(owner, entry_id, expires_at=now + 86400.0)
    assert (await shown()).expires_at == now + 86400.0
    await shown()
    if backend == "sqlite":
        assert len(fetched) == 3  # read again after each change, and only then


@pytest.mark.parametrize("big", [False, True], ids=["held", "packed"])
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_answers_kept_past_the_bound_are_all_still_returned(
    hub: Hub, acme: ProjectTokens, monkeypatch: pytest.MonkeyPatch, big: bool
) -> None:
    """When the kept entries (a big project's: packed) pass their
    process-wide bound they are dropped, and a recall that had some of its
    answers kept still returns them all."""
    from gateway.store import fts_counts, search_index

    if big:
        monkeypatch.setattr(search_index, "HELD_ROWS", 0)
    if big:
        monkeypatch.setattr(fts_counts, "packed_size", lambda packed: 1)
        monkeypatch.setattr(fts_counts, "MAX_PACKED_BYTES", 2)
    else:
        monkeypatch.setattr(fts_counts, "MAX_KEPT_ENTRIES", 2)
    ids = await _trusted(hub, "acme", [("fact", f"Nightly job {n} uploads the coverage report.") for n in range(3)])
    reader = await _reader(hub, acme.reader)
    _, first = await hub.recall.recall(reader, "which nightly job uploads the coverage report", None, 2)
    assert len(first) == 2  # two kept: the bound is full
    _, every = await hub.recall.recall(reader, "which nightly job uploads the coverage report", None, 3)
    assert sorted(e.id for e, _ in every) == sorted(ids.values())
