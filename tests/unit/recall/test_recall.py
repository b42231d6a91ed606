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
from gateway.recall.query import MAX_QUERY_CHARS, SYNONYM_WEIGHT, hinted_kinds, plan, terms, words
from gateway.recall.vocabulary import synonyms_for
from tests.conftest import ProjectTokens, make_project
from gateway.store.recall_index import fts5_expression, identifier_parts
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
    weights = dict(plan("rename the db table").terms)
    assert weights["rename"] == 1.0 and weights["db"] == 1.0
    assert weights["database"] == SYNONYM_WEIGHT and weights["name"] == SYNONYM_WEIGHT  # expansions
    assert "the" not in weights


def test_kind_hints() -> None:
    assert hinted_kinds(words("any gotchas with the pooler?")) == {"pitfall"}
    assert "decision" in hinted_kinds(words("why did we choose luxon"))
    assert hinted_kinds(words("pooler")) == frozenset()


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


def _match(query: str) -> str | None:
    return fts5_expression([word for word, _ in plan(query).terms])


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_text_is_always_a_valid_expression(fts: sqlite3.Connection, query: str) -> None:
    match = _match(query)
    if match is not None:
        fts.execute("SELECT rowid, bm25(f, 3, 1, 0.5, 1) FROM f WHERE f MATCH ?", (match,)).fetchall()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=MAX_QUERY_CHARS))
def test_any_text_is_a_valid_expression(fts: sqlite3.Connection, query: str) -> None:
    match = _match(query)
    assert match is None or len(match) < 20_000
    if match is not None:
        fts.execute("SELECT rowid FROM f WHERE f MATCH ?", (match,)).fetchall()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list('"*^:(){}+-.,;\'\\ NEARORANDNOT\x00😀ab')), max_size=200))
def test_operator_soup_is_a_valid_expression(fts: sqlite3.Connection, query: str) -> None:
    match = _match(query)
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
    if hub.recall.semantic is not None:
        await hub.recall.semantic.fill_all(hub.driver)
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
            ("pitfall", "Memcached silently drops cache keys longer than 250 bytes."),
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


async def test_a_big_project_still_finds_the_rare_answer(hub: Hub, acme: ProjectTokens) -> None:
    """With 400 entries sharing the question's common words, the entry
    holding its rare words comes first, with and without a kind filter."""
    project = (await hub.accounts.project("acme"))
    now = hub.clock.now()
    count = 400

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
        for i in range(count):
            await q.track_vector(first + i, project.id)

    await hub.driver.write(bulk)
    rare = await _trusted(hub, "acme", [("pitfall", "Deploy logs rotate at midnight and drop the last line.")])
    reader = await _reader(hub, acme.reader)
    for kind in (None, "pitfall"):
        _, results = await hub.recall.recall(reader, "why do deploy logs drop a line at midnight?", kind, 5)
        assert results[0][0].id == rare["Deploy logs rotate at midnight and drop the last line."]
    _, common_only = await hub.recall.recall(reader, "deploy logs stdout", None, 5)
    assert len(common_only) == 5 and all("stdout" in e.statement for e, _ in common_only)
    _, with_a_typo = await hub.recall.recall(reader, "deploy logs stdotu", None, 5)
    assert len(with_a_typo) == 5 and all("deploy logs" in e.statement.lower() for e, _ in with_a_typo)


async def test_what_recall_shows_of_an_entry_follows_it_and_trust_moves_the_generation(hub: Hub, acme: ProjectTokens) -> None:
    """A change a recall shows (a new support, a new expiry, a promotion, a
    refutation) is in the very next answer.  A change of trust moves the
    project's recall generation in its own transaction (the key of what a
    process keeps: the vector matrix); a support or an expiry, which nothing
    kept holds, does not (each moved made every process read the matrix again)."""
    from gateway.knowledge.model import Support

    project = await hub.accounts.project("acme")

    async def generation() -> int:
        return int(await hub.driver.read(lambda q: q.recall_generation(project.id)))

    before = await generation()
    ids = await _trusted(hub, "acme", [("fact", "Nightly builds publish to the staging bucket.")])
    entry_id = ids["Nightly builds publish to the staging bucket."]
    reader = await _reader(hub, acme.reader)
    promoted = await generation()
    assert promoted > before

    async def shown() -> Any:
        _, results = await hub.recall.recall(reader, "where do nightly builds publish")
        return results[0][0] if results else None

    first = await shown()
    assert first.id == entry_id and first.supports == [] and first.expires_at is None
    assert await generation() == promoted  # a recall changes nothing
    now = hub.clock.now()
    support = Support(issuer="oidc:ci.example.com:acme", source="nightly", attestation_id="at_1", at=now)
    outcome = await hub.driver.write(lambda q: hub.knowledge.apply_support(q, project, entry_id, support, now))
    assert outcome is not None and not outcome.duplicate
    assert [s.issuer for s in (await shown()).supports] == ["oidc:ci.example.com:acme"]
    supported = await generation()
    assert supported == promoted
    owner = await hub.accounts.authenticate(acme.owner)
    await hub.knowledge.set_expiry(owner, entry_id, expires_at=now + 86400.0)
    assert (await shown()).expires_at == now + 86400.0
    expiring = await generation()
    assert expiring == supported
    await hub.knowledge.refute(owner, entry_id, "moved to the release bucket")
    assert await shown() is None
    assert await generation() > expiring
