"""Recall on PostgreSQL: the store's own full-text index, with FTS5's
tokens, stems and BM25 computed in SQL (`gateway.store.recall_index_pg`),
only the rows that can reach the best scored, the size it keeps for BM25,
the round trips of a recall (the search and its record in one transaction:
one snapshot, a non-durable commit), and the rebuild of an index built
another way."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from gateway.hub import Hub
from gateway.knowledge.model import Principal
from gateway.store import recall_index_pg as sp
from tests.conftest import ProjectTokens

NOW = 1_800_000_000.0
pytestmark_pg = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
RARE = "Deploy logs rotate at midnight and drop the last line."


def test_documents_are_cut_into_fts5s_tokens() -> None:
    assert sp.document("Never commit uv.lock; run `uv lock`") == "never commit uv lock run uv lock"
    assert sp.document("ts files, Éléphant") == "tsss files elephant"


async def _bulk(hub: Hub, project_id: int, count: int) -> None:
    """`count` trusted entries that share their words, written straight into the tables."""

    async def unit(q: Any) -> None:
        rows = [(f"Service {i} writes its deploy logs to stdout in build {i % 97}.", "fact" if i % 2 else "convention")
                for i in range(count)]
        await q.tx.run_many(
            "INSERT INTO entries (id, project_id, kind, statement, evidence, norm_statement, state, created_at, created_by, "
            "created_via, promoted_at, promoted_by) VALUES (?, ?, ?, ?, NULL, ?, 'trusted', ?, 'bulk-loader', 'learn', ?, 'owner:olivia')",
            [(f"kn_bulk_{project_id}_{i}", project_id, kind, s, s.casefold(), NOW, NOW) for i, (s, kind) in enumerate(rows)],
        )
        written = await q.tx.all("SELECT seq, statement, kind FROM entries WHERE project_id = ? AND id LIKE 'kn_bulk_%'", project_id)
        await q.index.add_many(project_id, [(r["seq"], r["kind"], None, r["statement"], None) for r in written])

    await hub.driver.write(unit)


async def _trusted(hub: Hub, slug: str, kind: str, statement: str) -> str:
    project = await hub.accounts.project(slug)
    owner = Principal(project=project, name="olivia", level="owner")
    entry, _ = await hub.knowledge.learn(owner, kind, statement)
    await hub.knowledge.confirm(owner, entry.id)
    return entry.id


@pytestmark_pg
async def test_bm25_in_sql_is_fts5s_formula(hub: Hub, acme: ProjectTokens) -> None:
    """The server's score of a one-word question, against the formula by hand."""
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, 30)
    rare = await _trusted(hub, "acme", "pitfall", RARE)
    found = await hub.driver.read(lambda q: q.lexical(project.id, [("midnight", 1.0)], None, 5, NOW))
    assert [c.kind for c in found] == ["pitfall"]
    size = await hub.driver.read(lambda q: q.tx.one("SELECT rows, tokens FROM recall_index WHERE project_id = ?", project.id))
    n, tokens = int(size["rows"]), int(size["tokens"])
    length = len(sp.document(RARE).split()) + 1  # and the kind column
    idf = math.log((n - 1 + 0.5) / (1 + 0.5))
    f = 3.0  # one instance, in the statement column
    expected = idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length * n / tokens))
    assert found[0].score == pytest.approx(expected, rel=1e-6)
    # Two words of one stem count each, as FTS5 scores every word apart.
    both = await hub.driver.read(lambda q: q.lexical(project.id, [("midnight", 1.0), ("midnights", 0.25)], None, 5, NOW))
    assert both[0].score == pytest.approx(1.25 * expected, rel=1e-6)
    assert rare


@pytestmark_pg
async def test_the_kept_size_follows_promotions_retirements_and_readds(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    owner = await hub.accounts.authenticate(acme.owner)
    ids = [await _trusted(hub, "acme", "fact", f"Fact number {i} about the deploy logs.") for i in range(4)]
    await hub.knowledge.refute(owner, ids[0], "wrong")

    async def sizes(q: Any) -> tuple[Any, Any]:
        kept = await q.tx.one("SELECT rows, tokens FROM recall_index WHERE project_id = ?", project.id)
        real = await q.tx.one(f"SELECT COUNT(*) AS rows, COALESCE(SUM(len), 0) AS tokens FROM {sp.table(project.id)}")
        return (int(kept["rows"]), int(kept["tokens"])), (int(real["rows"]), int(real["tokens"]))

    kept, real = await hub.driver.read(sizes)
    assert kept == real and kept[0] == 3

    async def readd(q: Any) -> None:
        entry = await q.entry(project.id, ids[1])
        await q.index.add(entry)  # indexed already: counted once

    await hub.driver.write(readd)
    kept, real = await hub.driver.read(sizes)
    assert kept == real and kept[0] == 3


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
async def test_a_recall_is_seven_round_trips_and_its_record_is_kept(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, 20)
    rare = await _trusted(hub, "acme", "pitfall", RARE)
    reader = await hub.accounts.authenticate(acme.reader)
    hub.recall.semantic = None  # lexical recall: the fused one reads the vectors too
    sent = _count_round_trips(monkeypatch)
    recall_id, results = await hub.recall.recall(reader, "why do deploy logs drop a line at midnight?", None, 5)
    # BEGIN (with SET LOCAL synchronous_commit), the read budget's count (before
    # the search costs anything), the question's stems, their rows scored
    # (a project this small: all of them at once), the entries, the record, COMMIT.
    assert len(sent) == 7, sent
    assert sent[1].startswith("SELECT SUM(n)") and sent[2].startswith("SELECT l.lexeme") and "ts_rank_cd" in sent[3]
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
    one = await hub.driver.read(lambda q: q.recalled_entries(seqs))
    three = await hub.driver.read(lambda q: q.entries_by_seqs(seqs))
    assert one == three and len(one) == 3 == len(ids)
    assert [s.issuer for s in one[seqs[0]].supports][-2:] == ["ci", "zed"]
    assert [c.detail for c in one[seqs[1]].contradictions] == [{"why": "stale", "n": [1, 2.5]}, None]
    assert await hub.driver.read(lambda q: q.recalled_entries([])) == {}


async def _seq(hub: Hub, entry_id: str) -> int:
    row = await hub.driver.read(lambda q: q.tx.one("SELECT seq FROM entries WHERE id = ?", entry_id))
    return int(row["seq"])


# -- only the rows that can reach the best are scored ----------------------------------

VOCABULARY = [f"w{n}x" for n in range(60)]


def _words(rng: random.Random, count: int) -> list[str]:
    # Zipf-like: the first words are in most rows, the last in a few.
    return rng.choices(VOCABULARY, weights=[1 / (n + 2) for n in range(len(VOCABULARY))], k=count)


async def _every_row_scored(q: Any, project_id: int, terms: list[tuple[str, float]], kind: str | None, limit: int,
                            now: float) -> list[tuple[int, float]]:
    """FTS5's BM25 of every row, in Python, from the table's tsvectors."""
    size = await q.tx.one("SELECT rows, tokens FROM recall_index WHERE project_id = ?", project_id)
    n, average = int(size["rows"]), int(size["tokens"]) / int(size["rows"])
    rows = await q.tx.all(f"SELECT r.seq, r.kind, r.expires_at, r.len, u.lexeme, u.weights FROM {sp.table(project_id)} r, unnest(r.tsv) u")
    counts: dict[int, dict[str, float]] = {}
    meta = {}
    for r in rows:
        weight = dict(zip("ABCD", sp.WEIGHTS))
        counts.setdefault(r["seq"], {})[r["lexeme"]] = sum(weight[w] for w in r["weights"])
        meta[r["seq"]] = (r["kind"], r["expires_at"], r["len"])
    wanted: dict[str, float] = {}
    for word, weight in terms:
        stems = await q.tx.one(f"SELECT tsvector_to_array(to_tsvector('{sp.CONFIG}', ?)) AS s", sp.document(word))
        for stem in stems["s"]:
            wanted[stem] = wanted.get(stem, 0.0) + weight
    df = {stem: sum(1 for c in counts.values() if stem in c) for stem in wanted}
    scores = []
    for seq, found in counts.items():
        row_kind, expires_at, length = meta[seq]
        if not set(found) & set(wanted) or (kind and row_kind != kind) or (expires_at is not None and expires_at <= now):
            continue
        score = 0.0
        for stem, weight in wanted.items():
            if stem in found:
                idf = max(math.log((n - df[stem] + 0.5) / (df[stem] + 0.5)), 1e-6)
                f = found[stem]
                score += weight * idf * f * (sp.K1 + 1) / (f + sp.K1 * (1 - sp.B + sp.B * length / average))
        scores.append((seq, score))
    scores.sort(key=lambda item: (-item[1], -item[0]))
    return scores[:limit]


@pytestmark_pg
async def test_the_rows_scored_give_the_best_of_every_row(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    """Scoring only the rows of the rarest stems, then those whose stems'
    bounds reach the floor, gives what scoring every row gives."""
    project = await hub.accounts.project("acme")
    rng = random.Random(34)

    async def unit(q: Any) -> None:
        rows = [(" ".join(_words(rng, rng.randint(3, 14))), " ".join(_words(rng, rng.randint(0, 6))) or None,
                 rng.choice(["fact", "convention", "pitfall", "decision"]), rng.choice([None, None, None, NOW - 1, NOW + 1]))
                for _ in range(400)]
        await q.tx.run_many(
            "INSERT INTO entries (id, project_id, kind, statement, evidence, norm_statement, state, created_at, created_by, "
            "created_via, expires_at, promoted_at, promoted_by) "
            "VALUES (?, ?, ?, ?, ?, ?, 'trusted', ?, 'bulk-loader', 'learn', ?, ?, 'owner:olivia')",
            [(f"kn_zipf_{i}", project.id, kind, s, e, f"{i} {s}", NOW - 10, expires, NOW - 10)
             for i, (s, e, kind, expires) in enumerate(rows)],
        )
        written = await q.tx.all("SELECT seq, kind, expires_at, statement, evidence FROM entries WHERE project_id = ?", project.id)
        await q.index.add_many(project.id, [(r["seq"], r["kind"], r["expires_at"], r["statement"], r["evidence"]) for r in written])

    await hub.driver.write(unit)
    pruned = []

    def counted(bounds: Any, floor: float) -> list[list[int]]:
        sets = sp_covers(bounds, floor)
        pruned.append(floor > 0 and len({i for chosen in sets for i in chosen}) < len(bounds))
        return sets

    sp_covers = sp.covers
    monkeypatch.setattr(sp, "covers", counted)
    for _ in range(60):
        terms = [(w, rng.choice([1.0, 1.0, 0.25])) for w in _words(rng, rng.randint(1, 6))] + [("nowhere", 1.0)]
        kind, limit = rng.choice([None, None, "pitfall"]), rng.choice([5, 30, 60])
        found = await hub.driver.read(lambda q: q.lexical(project.id, terms, kind, limit, NOW))
        expected = await hub.driver.read(lambda q: _every_row_scored(q, project.id, terms, kind, limit, NOW))
        assert [c.seq for c in found] == [seq for seq, _ in expected], terms
        assert [c.score for c in found] == pytest.approx([score for _, score in expected], rel=1e-6)
    assert sum(pruned) >= 10  # the floor left some stems' rows unread


def test_covers_are_the_smallest_sets_that_reach_the_floor() -> None:
    assert sp.covers([5.0, 3.0, 2.0, 1.0], 4.0) == [[0], [1, 2], [1, 3]]
    assert sp.covers([5.0, 3.0], 9.0) == []
    assert sp.covers([2.0, 1.0], 0.0) == [[0], [1]]
    many = sp.covers([1.0] * 20, 5.0)  # C(20, 5) sets: every stem alone instead
    assert many == [[i] for i in range(20)]


# -- an index built the old way is rebuilt at start ---------------------------------------


async def test_an_index_of_the_old_layout_is_rebuilt_when_the_gateway_starts() -> None:
    """A database whose recall tables were built another way (here: the
    `english` configuration, no lengths, the old size table) gets them
    rebuilt from the trusted entries by the driver's migration step, once."""
    from gateway.store.postgres import PostgresDriver
    from tests.support.pg import fresh_database

    with fresh_database() as url:
        from gateway.core.clock import ManualClock
        from gateway.core.config import Config

        hub = Hub(Config.from_env({}, database_url=url, sweep_interval=0.0, semantic_model="off"), clock=ManualClock(start=NOW))
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
                await q.tx.run("CREATE TABLE recall_sizes (project_id BIGINT PRIMARY KEY)")
                await q.tx.run("DELETE FROM meta WHERE key = 'recall_index'")

            await hub.driver.write(old)
        finally:
            await hub.stop()
        driver = PostgresDriver(url)
        await driver.open()
        try:
            async def unit(q: Any) -> tuple[Any, Any, Any]:
                version = await q.tx.one("SELECT value FROM meta WHERE key = 'recall_index'")
                row = await q.tx.one(f"SELECT len FROM {sp.table(project.id)}")
                return version, row, await q.lexical(project.id, [("uv", 1.0), ("lock", 1.0)], None, 5, NOW)

            version, row, found = await driver.read(unit)
            seq = await driver.read(lambda q: q.tx.one("SELECT seq FROM entries WHERE id = ?", rare))
        finally:
            await driver.close()
    assert version["value"] == sp.INDEX_VERSION
    assert row["len"] == 9 + 1  # the statement's tokens (uv.lock is two), and the kind
    assert [c.seq for c in found] == [seq["seq"]]
