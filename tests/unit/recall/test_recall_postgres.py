"""PostgreSQL recall on big projects: FTS5's bm25 from the counts
(`gateway.store.search_postgres`), and for prefix phrases a bounded
candidate set chosen from the table's statistics
(`gateway.store.pg_prefix_ranking`).

The choice itself is pure and tested without a database; the rest runs
against a real server (skipped without one, like every PostgreSQL test):
a small table and a big table whose question holds few rows are ranked
whole, exactly as "rank every match" ranks them; a big table without
statistics is ranked whole too; with statistics, the entry holding the
rare word comes first, common words still bring an answer, and a rare word
that holds nothing does not empty the list.

And the round trips of a recall: the search and its record in one
transaction (one snapshot, a non-durable commit), the entries and the record
one statement each, the table's statistics cached but checked against the
table by every search (an ANALYZE is seen at once)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.hub import Hub
from gateway.knowledge.model import Principal
from dataclasses import replace

from gateway.recall.search import DEFAULT_RANKING, Candidate, Phrase, Ranking, plan_query, rerank
from gateway.store import pg_prefix_ranking as pp
from gateway.store import pg_tsquery as tq
from gateway.store import search_postgres as sp
from tests.conftest import ProjectTokens

NOW = 1_800_000_000.0
# Prefix phrases are the one thing still ranked by ts_rank over a candidate
# set picked with the table's statistics: the tests of that path use them.
PREFIX = replace(DEFAULT_RANKING, name="prefix", prefix=True)


def _phrases(*items: tuple[str, int]) -> tuple[Phrase, ...]:
    return tuple(Phrase(text, weight, False, expansion=weight == 1) for text, weight in items)


# -- the choice, pure ------------------------------------------------------------------


def test_few_matching_rows_are_ranked_whole() -> None:
    phrases = _phrases(("deploy", 4), ("midnight", 4))
    assert pp.select(phrases, {"deploy": 600.0, "midnight": 300.0}, 100_000.0, budget=1000) is None


def test_the_rarest_words_per_unit_of_weight_bring_the_rows_in() -> None:
    phrases = _phrases(("deploy", 4), ("logs", 4), ("midnight", 4), ("release", 1), ("nightly", 1))
    rows = {"deploy": 9000.0, "logs": 2400.0, "midnight": 40.0, "release": 700.0, "nightly": 300.0}
    chosen = pp.select(phrases, rows, 100_000.0, budget=1000)
    assert chosen is not None
    # midnight (40/4) and nightly (300/1) fit; logs (2400) and release (700 more: 1040) do not.
    assert [p.text for p in chosen.rare] == ["midnight", "nightly"]
    assert [p.text for p in chosen.common] == ["logs", "deploy"]  # the agent's words left out, rarest first
    assert not chosen.now  # one of the agent's words is rare: the common ones only fill up
    assert chosen.every  # 9000 x 2400 / 100k: about 216 rows hold both, few enough to rank
    assert pp.select(phrases, rows, 100_000.0, budget=300) is not None


def test_when_every_word_of_the_agent_is_common_its_rows_compete_at_once() -> None:
    phrases = _phrases(("deploy", 4), ("logs", 4), ("pipeline", 1))
    rows = {"deploy": 9000.0, "logs": 2400.0, "pipeline": 100.0}
    chosen = pp.select(phrases, rows, 100_000.0, budget=1000)
    assert chosen is not None and chosen.now
    assert [p.text for p in chosen.rare] == ["pipeline"]
    assert [p.text for p in chosen.common] == ["logs", "deploy"]
    assert chosen.every  # about 216 rows hold both words: the AND is worth ranking
    lone = pp.select(_phrases(("tests", 4)), {"tests": 30_000.0}, 100_000.0, budget=1000)
    assert lone is not None and lone.now and not lone.every and [p.text for p in lone.common] == ["tests"]


def test_phrases_of_stop_words_are_left_out_and_synonyms_stand_in_when_no_word_is_left() -> None:
    phrases = _phrases(("the", 4), ("db", 1), ("database", 1))
    chosen = pp.select(phrases, {"the": 0.0, "db": 5000.0, "database": 8000.0}, 100_000.0, budget=1000)
    assert chosen is not None and chosen.rare == () and chosen.now
    assert [p.text for p in chosen.common] == ["db", "database"]


def test_filling_rows_rank_below_every_row_that_holds_a_rare_word() -> None:
    ranked = [Candidate(1, 0.9, "fact"), Candidate(2, 0.3, "fact")]
    more = [Candidate(3, 1.2, "fact"), Candidate(4, 0.6, "pitfall")]
    below = pp.below(more, ranked)
    assert [c.seq for c in below] == [3, 4]
    assert max(c.score for c in below) < 0.3 and below[0].score > below[1].score
    assert pp.below([Candidate(5, 0.1, "fact")], ranked) == [Candidate(5, 0.1, "fact")]  # already below
    assert pp.below(more, []) == more


def test_the_tsquery_of_many_phrases_is_one_quoted_parameter() -> None:
    phrases = _phrases(("it's", 4), ("a|b", 4), ("x", 1))
    # Each phrase is cut into FTS5's tokens (as the documents are): what is
    # left is words, one quoted lexeme per phrase.
    assert tq.tsquery_text(phrases) == "'it s' | 'a b' | 'x'"
    assert tq.tsquery_text(phrases, "&") == "'it s' & 'a b' & 'x'"


# -- through a real server ---------------------------------------------------------------

pytestmark_pg = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

RARE = "Deploy logs rotate at midnight and drop the last line."


async def _bulk(hub: Hub, project_id: int, count: int, *, analyze: bool = True, prefix: str = "bulk") -> None:
    """`count` trusted entries that share their words, written straight
    into the tables (as bench/recall_latency.py does), then ANALYZE."""

    async def unit(q: Any) -> None:
        now = NOW
        rows = [
            (f"Service {i} writes its deploy logs to stdout in build {i % 97}.", "fact" if i % 2 else "convention")
            for i in range(count)
        ]
        await q.tx.run_many(
            "INSERT INTO entries (id, project_id, kind, statement, evidence, norm_statement, state, created_at, created_by, "
            "created_via, promoted_at, promoted_by) VALUES (?, ?, ?, ?, NULL, ?, 'trusted', ?, 'bulk-loader', 'learn', ?, 'owner:olivia')",
            [(f"kn_{prefix}_{project_id}_{i}", project_id, kind, s, s.casefold(), now, now) for i, (s, kind) in enumerate(rows)],
        )
        written = await q.tx.all(
            "SELECT seq, statement, kind FROM entries WHERE project_id = ? AND id LIKE ?", project_id, f"kn_{prefix}_%"
        )
        await sp.add_many(q.tx, project_id, [(r["seq"], r["kind"], None, r["statement"], None) for r in written])
        if not analyze:  # and autovacuum must not do it behind the test's back
            await q.tx.run(f"ALTER TABLE {sp.table(project_id)} SET (autovacuum_enabled = false)")

    await hub.driver.write(unit)
    if analyze:
        await hub.driver.write(lambda q: q.tx.run(f"ANALYZE {sp.table(project_id)}"))


async def _trusted(hub: Hub, slug: str, kind: str, statement: str) -> str:
    project = await hub.accounts.project(slug)
    owner = Principal(project=project, name="olivia", level="owner")
    entry, _ = await hub.knowledge.learn(owner, kind, statement)
    await hub.knowledge.confirm(owner, entry.id)
    return entry.id


async def _every_match(hub: Hub, project_id: int, query: str, kind: str | None, limit: int) -> list[tuple[int, float]]:
    """The reference of the ts_rank path: rank every matching row."""
    plan = plan_query(query, PREFIX)
    groups = pp._groups(plan)
    ranked = pp._Ranked(sp.table(project_id), groups, PREFIX, kind, NOW)
    wanted = max(limit, min(60, limit * 3))
    candidates = await hub.driver.read(lambda q: ranked.best(q.tx, [ranked.matching()], wanted))
    return rerank(candidates, plan, PREFIX, limit)


async def _search(
    hub: Hub, project_id: int, query: str, kind: str | None = None, limit: int = 10, ranking: Ranking | None = None
) -> list[tuple[int, float]]:
    return await hub.driver.read(lambda q: q.index.search(project_id, query, kind, limit, NOW, ranking=ranking))


QUESTIONS = ["why do deploy logs drop a line at midnight?", "stdout", "service build 7", "rotate logs", "nothing matches zzzq"]


@pytestmark_pg
async def test_a_small_project_is_ranked_whole_by_fts5s_bm25(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    """Every matching row, scored as SQLite scores it (that the scores are
    SQLite's own is tests/unit/recall/test_recall_parity.py)."""
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, sp.CANDIDATE_ROWS // 2)
    rare = await _trusted(hub, "acme", "pitfall", RARE)
    await hub.driver.write(lambda q: q.tx.run(f"ANALYZE {sp.table(project.id)}"))
    exact: list[Any] = []
    real_exact = sp.PostgresFtsIndex._exact

    async def spy(self: Any, *args: Any) -> Any:
        exact.append(await real_exact(self, *args))
        return exact[-1]

    monkeypatch.setattr(sp.PostgresFtsIndex, "_exact", spy)
    for question in QUESTIONS:
        for kind in (None, "pitfall"):
            found = await _search(hub, project.id, question, kind)
            assert exact[-1] is not None
            assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
            if kind is None:
                assert bool(found) == (question != "nothing matches zzzq")
    seq = (await hub.driver.read(lambda q: q.tx.one("SELECT seq FROM entries WHERE id = ?", rare)))["seq"]
    assert (await _search(hub, project.id, QUESTIONS[0]))[0][0] == seq


@pytestmark_pg
async def test_a_big_project_without_statistics_is_ranked_whole_by_prefix(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, sp.CANDIDATE_ROWS * 3, analyze=False)
    for question in QUESTIONS:
        assert await _search(hub, project.id, question, ranking=PREFIX) == await _every_match(hub, project.id, question, None, 10)


@pytestmark_pg
async def test_a_big_project_is_ranked_by_bm25_in_two_statements(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    """Past CANDIDATE_ROWS: the counts and stems in one statement, the rows
    of the phrases SQLite keeps in one more per ranked list."""
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, sp.CANDIDATE_ROWS * 3, analyze=False)
    rare = await _seq(hub, await _trusted(hub, "acme", "pitfall", RARE))
    sent = _count_round_trips(monkeypatch)
    found = await _search(hub, project.id, "why do deploy logs drop a line at midnight?")
    assert found[0][0] == rare
    inner = [sql for sql in sent if sql not in ("COMMIT;",) and not sql.startswith("BEGIN")]
    # The counts, then the rows of the agent's words and of the synonyms.
    assert len(inner) == 3 and "recall_sizes" in inner[0] and all(q.startswith(("SELECT r.seq", "WITH t AS")) for q in inner[1:]), sent
    sent.clear()
    assert (await _search(hub, project.id, "midnight", "pitfall"))[0][0] == rare
    assert len([sql for sql in sent if "recall_" in sql]) == 2, sent


@pytestmark_pg
async def test_a_big_project_ranks_the_rows_of_its_rare_words(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, pp.CANDIDATE_ROWS * 3)
    rare = await _trusted(hub, "acme", "pitfall", RARE)
    await hub.driver.write(lambda q: q.tx.run(f"ANALYZE {sp.table(project.id)}"))
    chosen: list[Any] = []
    real_select = pp.select
    monkeypatch.setattr(pp, "select", lambda *a, **k: chosen.append(real_select(*a, **k)) or chosen[-1])

    seq = await _seq(hub, rare)
    for kind in (None, "pitfall"):
        results = await _search(hub, project.id, "why do deploy logs drop a line at midnight?", kind, 5, PREFIX)
        assert results[0][0] == seq
    assert chosen and chosen[-1] is not None and "midnight" in [p.text for p in chosen[-1].rare]

    # Every word common: the rows holding all of them (and the newest) still answer.
    common = await _search(hub, project.id, "deploy logs stdout", None, 5, PREFIX)
    assert len(common) == 5
    assert chosen[-1] is not None and chosen[-1].now

    # A word in no row, counted as rare by the estimate: the common words fill the list, below it.
    filled = await _search(hub, project.id, "midnight zzzqx logs", None, 10, PREFIX)
    assert filled[0][0] == seq and len(filled) == 10
    assert [s for _, s in filled] == sorted((s for _, s in filled), reverse=True)


@pytestmark_pg
async def test_a_big_project_with_a_question_of_rare_words_is_ranked_whole(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, pp.CANDIDATE_ROWS * 3)
    await _trusted(hub, "acme", "pitfall", RARE)
    await hub.driver.write(lambda q: q.tx.run(f"ANALYZE {sp.table(project.id)}"))
    for question in ("midnight rotation", "rotate", "midnight"):  # words of five letters or more: prefixes
        assert await _search(hub, project.id, question, ranking=PREFIX) == await _every_match(hub, project.id, question, None, 10)


# -- fewer round trips: cached statistics, one transaction, one statement each ------------


def test_estimates_count_a_phrase_at_its_rarest_lexeme_and_unlisted_ones_at_half_the_rarest() -> None:
    stats = pp.TableStats(10_000.0, "t", {"deploy": 0.3, "log": 0.2, "midnight": 0.004}, 0.001)
    phrases = _phrases(("deploy", 4), ("logs", 4), ("it's", 4), ("the", 4), ("zzzqx", 1))
    lexemes = {"deploy": ("deploy",), "logs": ("log",), "it's": ("deploy", "midnight"), "the": (), "zzzqx": ("zzzqx",)}
    estimates = pp.estimate(phrases, lexemes, stats, budget=1000)
    assert estimates == {"deploy": 3000.0, "logs": 2000.0, "it's": 40.0, "the": 0.0, "zzzqx": 10.0}
    # Few rows in all, a small table, or no statistics: rank every match.
    assert pp.estimate(phrases[2:], lexemes, stats, budget=1000) is None
    assert pp.estimate(phrases, lexemes, pp.TableStats(900.0, "t", stats.shares, 0.001), budget=1000) is None
    assert pp.estimate(phrases, lexemes, pp.TableStats(10_000.0, "t", None), budget=1000) is None


async def test_without_the_driver_method_a_read_then_write_is_a_read_and_a_write() -> None:
    from gateway.store.base import Driver

    calls: list[Any] = []

    class Plain(Driver):  # SQLite's shape: no read_then_write of its own
        async def open(self) -> None: ...

        async def close(self) -> None: ...

        async def ping(self) -> bool:
            return True

        async def read(self, unit: Any) -> Any:
            calls.append("read")
            return await unit("reader")

        async def write(self, unit: Any, *, durable: bool = True) -> Any:
            calls.append(("write", durable))
            return await unit("writer")

    async def read(q: Any) -> str:
        return f"found by {q}"

    async def write(q: Any, found: str) -> None:
        calls.append((q, found))

    assert await Plain().read_then_write(read, write, durable=False) == "found by reader"
    assert calls == ["read", ("write", False), ("writer", "found by reader")]


@pytest.fixture
async def driver() -> Any:
    from tests.support.pg import open_postgres

    async with open_postgres("?pool_max=2") as d:
        yield d


async def test_a_read_then_write_is_one_snapshot_and_one_non_durable_commit(driver: Any) -> None:
    async def read(q: Any) -> str:
        row = await q.tx.one("SELECT current_setting('transaction_isolation') AS iso, txid_current_if_assigned() AS x")
        assert row["x"] is None  # nothing written yet
        return str(row["iso"])

    async def write(q: Any, iso: str) -> None:
        mode = await q.tx.one("SELECT current_setting('synchronous_commit') AS mode")
        await q.tx.run("INSERT INTO meta(key, value) VALUES ('seen', ?)", f"{iso}/{mode['mode']}")

    assert await driver.read_then_write(read, write, durable=False) == "repeatable read"
    assert await driver.read(lambda q: q.meta_get("seen")) == "repeatable read/off"
    # The setting was that transaction's own.
    assert await driver.write(lambda q: q.tx.one("SELECT current_setting('synchronous_commit') AS mode")) == {"mode": "on"}

    async def failing(q: Any, iso: str) -> None:
        await q.tx.run("INSERT INTO meta(key, value) VALUES ('half', 'done')")
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        await driver.read_then_write(read, failing, durable=False)
    assert await driver.read(lambda q: q.meta_get("half")) is None  # rolled back, the connection reusable
    assert await driver.write(lambda q: q.meta_get("seen"), durable=False) == "repeatable read/off"


async def test_each_database_has_its_own_cache_key(driver: Any) -> None:
    from tests.support.pg import open_postgres

    assert driver.cache_key and driver.cache_key.startswith(driver.url + "#")
    async def key(q: Any) -> str:
        return str(q.tx.cache_key)

    assert await driver.read(key) == driver.cache_key
    async with open_postgres() as other:
        assert other.cache_key and other.cache_key != driver.cache_key


def _count_round_trips(monkeypatch: Any) -> list[str]:
    """Every statement sent to the server from now on (BEGIN and COMMIT too)."""
    from asyncpg import connection

    sent: list[str] = []
    execute, run = connection.Connection.execute, connection.Connection._execute

    async def counted_execute(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        if not args:
            sent.append(query)
        return await execute(self, query, *args, **kwargs)

    async def counted_run(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query)
        return await run(self, query, *args, **kwargs)

    monkeypatch.setattr(connection.Connection, "execute", counted_execute)
    monkeypatch.setattr(connection.Connection, "_execute", counted_run)
    return sent


@pytestmark_pg
async def test_a_recall_is_six_round_trips_and_its_record_is_kept(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, 20)
    rare = await _trusted(hub, "acme", "pitfall", RARE)
    reader = await hub.accounts.authenticate(acme.reader)
    await hub.recall.recall(reader, "deploy logs")  # reads the table's statistics once
    sent = _count_round_trips(monkeypatch)
    recall_id, results = await hub.recall.recall(reader, "why do deploy logs drop a line at midnight?", None, 5)
    # BEGIN (with SET LOCAL synchronous_commit), the read budget's count (before
    # the search costs anything), the search, the entries, the record, COMMIT.
    assert len(sent) == 6, sent
    assert sent[1].startswith("SELECT SUM(n)")
    assert sent[0].startswith("BEGIN ISOLATION LEVEL REPEATABLE READ") and "synchronous_commit TO OFF" in sent[0]
    assert results[0][0].id == rare and len(results) == 5
    monkeypatch.undo()

    async def record(q: Any) -> tuple[Any, list[Any]]:
        head = await q.tx.one("SELECT seq, returned, principal FROM recalls WHERE id = ?", recall_id)
        rows = await q.tx.all(
            "SELECT entry_seq, rank, score FROM recall_results WHERE recall_seq = ? ORDER BY rank", head["seq"]
        )
        return head, rows

    head, rows = await hub.driver.read(record)
    assert head["returned"] == 5 and head["principal"] == reader.name
    assert [(r["entry_seq"], r["rank"], r["score"]) for r in rows] == [(e.seq, i, s) for i, (e, s) in enumerate(results)]
    assert await hub.recall.used(reader, recall_id, rare) is True
    # A recall that finds nothing is recorded too, with no results.
    empty_id, nothing = await hub.recall.recall(reader, "zzzqx qqqzz")
    assert nothing == []
    head = await hub.driver.read(lambda q: q.tx.one("SELECT seq, returned FROM recalls WHERE id = ?", empty_id))
    assert head["returned"] == 0
    stored = await hub.driver.read(lambda q: q.tx.all("SELECT * FROM recall_results WHERE recall_seq = ?", head["seq"]))
    assert stored == []


@pytestmark_pg
async def test_recalled_entries_are_one_statement_with_what_entries_by_seqs_reads(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    ids = [
        await _trusted(hub, "acme", kind, f"Entry {i} about deploy logs and {kind}s.")
        for i, kind in enumerate(("fact", "pitfall", "decision"))
    ]

    async def extra(q: Any) -> list[int]:
        seqs = [r["seq"] for r in await q.tx.all("SELECT seq FROM entries WHERE project_id = ? ORDER BY seq", project.id)]
        await q.tx.run(
            "INSERT INTO supports (entry_seq, issuer, source, attestation_id, at) "
            "VALUES (?, 'ci', 'attest', NULL, 1.5), (?, 'zed', 'attest', 'at_1', 2.25)",
            seqs[0],
            seqs[0],
        )
        await q.tx.run(
            "INSERT INTO contradictions (entry_seq, project_id, by_principal, detail, at, until) VALUES "
            "(?, ?, 'agent-7', ?, 3.0, 4.5), (?, ?, 'agent-8', NULL, 3.5, 5.0)",
            seqs[1], project.id, '{"why": "stale", "n": [1, 2.5]}', seqs[1], project.id,
        )
        return seqs

    seqs = await hub.driver.write(extra)
    one = await hub.driver.read(lambda q: q._recalled_entries(seqs))
    three = await hub.driver.read(lambda q: q.entries_by_seqs(seqs))
    assert one == three and len(one) == 3 == len(ids)
    assert [s.issuer for s in one[seqs[0]].supports][-2:] == ["ci", "zed"]
    assert [c.detail for c in one[seqs[1]].contradictions] == [{"why": "stale", "n": [1, 2.5]}, None]
    assert await hub.driver.read(lambda q: q._recalled_entries([])) == {}


@pytestmark_pg
async def test_cached_statistics_follow_the_table_as_it_grows(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    """A search right after an ANALYZE picks its rows from the new
    statistics, as a process that never cached them would."""
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, pp.CANDIDATE_ROWS // 2)
    rare = await _trusted(hub, "acme", "pitfall", RARE)
    question = "why do deploy logs drop a line at midnight?"
    assert (await _search(hub, project.id, question, ranking=PREFIX))[0][0] == await _seq(hub, rare)
    cached = pp._stats[(hub.driver.cache_key, sp.table(project.id))][1]
    assert cached.rows <= pp.CANDIDATE_ROWS and cached.shares is None  # small: ranked whole, no statistics read

    chosen: list[Any] = []
    real_select = pp.select
    monkeypatch.setattr(pp, "select", lambda *a, **k: chosen.append(real_select(*a, **k)) or chosen[-1])
    await _bulk(hub, project.id, pp.CANDIDATE_ROWS * 3, prefix="more")  # and ANALYZE
    after = await _search(hub, project.id, question, ranking=PREFIX)
    assert chosen and chosen[-1] is not None  # the rows of the rare words, not every match
    pp.forget()
    assert await _search(hub, project.id, question, ranking=PREFIX) == after
    assert after[0][0] == await _seq(hub, rare)

    # Past STATS_SECONDS the statistics are read again, checked or not.
    statements = _count_round_trips(monkeypatch)
    await _search(hub, project.id, question, ranking=PREFIX)
    assert not any("pg_stats" in s for s in statements)
    later = pp._clock() + pp.STATS_SECONDS + 1
    monkeypatch.setattr(pp, "_clock", lambda: later)
    await _search(hub, project.id, question, ranking=PREFIX)
    assert sum("pg_stats" in s for s in statements) == 1


async def _seq(hub: Hub, entry_id: str) -> int:
    row = await hub.driver.read(lambda q: q.tx.one("SELECT seq FROM entries WHERE id = ?", entry_id))
    return int(row["seq"])


# -- an index built the old way is rebuilt at start ---------------------------------------


async def test_an_index_of_the_old_layout_is_rebuilt_when_the_gateway_starts() -> None:
    """A database whose recall tables were built with the `english`
    configuration (no token counts, ts_rank) gets them rebuilt from the
    trusted entries by the driver's migration step, once."""
    from gateway.store.postgres import PostgresDriver
    from tests.support.pg import fresh_database

    with fresh_database() as url:
        from gateway.core.clock import ManualClock
        from gateway.core.config import Config

        hub = Hub(Config.from_env({}, database_url=url, sweep_interval=0.0), clock=ManualClock(start=NOW))
        await hub.start(background=False)
        try:
            project = await hub.accounts.create_project("acme")
            rare = await _trusted(hub, "acme", "pitfall", "Never commit uv.lock by hand; run uv lock.")

            async def old(q: Any) -> None:
                name = sp.table(project.id)
                await q.tx.run(f"DROP TABLE {name}")
                await q.tx.run(f"CREATE TABLE {name} (seq BIGINT PRIMARY KEY, kind TEXT NOT NULL, "
                               "expires_at DOUBLE PRECISION, tsv tsvector NOT NULL)")
                await q.tx.run(f"INSERT INTO {name} SELECT seq, kind, expires_at, to_tsvector('english', statement) "
                               "FROM entries WHERE project_id = ?", project.id)
                await q.tx.run("DELETE FROM meta WHERE key = 'recall_index'")

            await hub.driver.write(old)
        finally:
            await hub.stop()
        driver = PostgresDriver(url)
        await driver.open()
        try:
            async def unit(q: Any) -> tuple[Any, Any, list[tuple[int, float]]]:
                version = await q.tx.one("SELECT value FROM meta WHERE key = 'recall_index'")
                row = await q.tx.one(f"SELECT len FROM {sp.table(project.id)}")
                return version, row, await q.index.search(project.id, "uv lock", None, 5, NOW)

            version, row, found = await driver.read(unit)
            seq = await driver.read(lambda q: q.tx.one("SELECT seq FROM entries WHERE id = ?", rare))
        finally:
            await driver.close()
    assert version["value"] == sp.INDEX_VERSION
    assert row["len"] == 9 + 1  # the statement's tokens (uv.lock is two), and the kind
    assert [s for s, _ in found] == [seq["seq"]]
