"""A project held in memory ranks exactly as FTS5's own statements rank it.

SQLite's recall ranks a project of at most HELD_ROWS entries (300; 1,000
here, to rank more of the evaluation at once) in Python from
the index's own token instances (`gateway.store.fts_memory`,
`gateway.store.bm25_ranking`), and a bigger one with FTS5 statements.  Here
both run on the same snapshot of the same file: the evaluation set pooled
into one project with synthetic entries of its own words (phrases past the
candidates' cut with and without a kind filter, so both one ranking and two
fused ones; phrases of several tokens; expired entries), every question on
every rung of the ladder but prefix matching, with and without `kind=`.
Then the held copy follows the index: a promotion, a retirement, an expiry,
and a process-wide bound that drops held copies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from bench.recall_quality import load
from gateway.recall.search import LADDER, Ranking
from gateway.store import fts_memory, search_index
from gateway.store.search_index import SqliteFtsIndex
from tests.support.ranking_parity import compare_rankings
from tests.unit.recall.test_recall_parity_big import Side, evaluation_pool, held_parity_questions

NOW = 1_800_000_000.0
LIMIT = 20
RANKINGS = [r for r in LADDER if not r.prefix]


HELD = 1000  # past the default bound (a cost choice): the evaluation set pooled, and padding


@pytest.fixture
async def side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Side, list[str]]]:
    monkeypatch.setattr(search_index, "HELD_ROWS", HELD)
    entries, _ = load()
    async with evaluation_pool(tmp_path / "held.db", HELD - sum(len(v) for v in entries.values()) - 10) as pool:
        yield pool


async def both(side: Side, text: str, kind: str | None, ranking: Ranking) -> tuple[list[Any], list[Any], bool]:
    """The held ranking and FTS5's, on one snapshot, and whether the first was held."""

    async def unit(q: Any) -> tuple[list[tuple[int, float]], list[tuple[int, float]], bool]:
        held = await q.index.search(side.project_id, text, kind, LIMIT, NOW, ranking=ranking)
        known = await q.tx.phrase_counts.table(q.tx, SqliteFtsIndex.table(side.project_id))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(search_index, "HELD_ROWS", -1)  # FTS5's statements, the kept counts as a reader keeps them
            fts = await q.index.search(side.project_id, text, kind, LIMIT, NOW, ranking=ranking)
        return held, fts, known.held is not None

    held, fts, was_held = await side.hub.driver.read(unit)
    name = side.names.get
    return [(name(s, f"pad-{s}"), x) for s, x in held], [(name(s, f"pad-{s}"), x) for s, x in fts], was_held


async def test_a_held_project_ranks_as_fts5_does(side: tuple[Side, list[str]]) -> None:
    pool, hot = side

    async def pair(text: str, kind: str | None, ranking: Ranking) -> tuple[list[Any], list[Any]]:
        held, fts, was_held = await both(pool, text, kind, ranking)
        assert was_held
        return held, fts

    compared = await compare_rankings(held_parity_questions(hot), RANKINGS, pair, LIMIT)
    assert not compared.differ, f"{len(compared.differ)} of {compared.asked} searches differ, first: {compared.differ[:3]}"
    # The questions reach both of SQLite's ways (one ranking, two fused) and some find nothing.
    assert compared.fused > compared.asked // 4 and compared.empty > 0


async def test_the_held_copy_follows_the_index(side: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    pool, _ = side
    hub, owner = pool.hub, pool.owner
    question = "quasar flux capacitor calibration"

    async def ask(now: float = NOW) -> list[int]:
        async def unit(q: Any) -> list[tuple[int, float]]:
            return await q.index.search(pool.project_id, question, None, LIMIT, now)

        return [seq for seq, _ in await hub.driver.read(unit)]

    assert await ask() == []
    entry, _ = await hub.knowledge.learn(owner, "fact", "The quasar flux capacitor needs calibration weekly.", None)
    assert await ask() == []  # a candidate is not in the index
    await hub.knowledge.confirm(owner, entry.id)
    assert await ask() == [entry.seq]
    # An owner's expiry: gone from the held ranking from that instant.
    await hub.knowledge.set_expiry(owner, entry.id, expires_at=NOW + 60.0)
    assert await ask(NOW + 59.0) == [entry.seq]
    assert await ask(NOW + 61.0) == []
    await hub.knowledge.set_expiry(owner, entry.id, clear=True)
    assert await ask(NOW + 61.0) == [entry.seq]
    # A process-wide bound: held copies are dropped and read again.
    from gateway.store import fts_counts

    drops: list[int] = []
    drop = fts_counts.PhraseCounts._drop_held

    def counted(self: fts_counts.PhraseCounts) -> None:
        drops.append(self._held_instances)
        drop(self)

    monkeypatch.setattr(fts_counts.PhraseCounts, "_drop_held", counted)
    monkeypatch.setattr(fts_counts, "HELD_INSTANCES", 10)
    await hub.knowledge.set_expiry(owner, entry.id, expires_at=NOW + 3600.0)  # a new version, loaded again
    assert await ask() == [entry.seq]
    assert drops, "loading past the bound dropped no held copy"
    assert await ask() == [entry.seq]
    monkeypatch.undo()
    await hub.knowledge.retire(owner, entry.id, "no longer true")
    assert await ask() == []


async def test_a_bigger_project_stays_on_fts5(side: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    pool, hot = side
    monkeypatch.setattr(search_index, "HELD_ROWS", 100)

    async def unit(q: Any) -> bool:
        await q.index.search(pool.project_id, " ".join(hot[:3]), None, LIMIT, NOW)
        known = await q.tx.phrase_counts.table(q.tx, SqliteFtsIndex.table(pool.project_id))
        return known.held is None and known.rows > 100

    assert await pool.hub.driver.read(unit)


async def test_stems_are_the_index_tokenizers() -> None:
    import sqlite3

    texts = ["running", "it's", "uv.lock", "naïve", "ÜBERCONFIG", "x", "ts", "généralisations", "y" * 70,
             "E0463", "happy", "relational", "café-au-lait", "日本語", "under_score", ""]
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{fts_memory.TOKENIZE}')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", list(enumerate(texts)))
    expected: dict[int, list[tuple[int, str]]] = {}
    for term, doc, offset in conn.execute("SELECT term, doc, offset FROM v"):
        expected.setdefault(doc, []).append((offset, term))
    stems = fts_memory.Stems()
    got = stems.of(texts)
    assert got == {t: tuple(term for _, term in sorted(expected.get(i, []))) for i, t in enumerate(texts)}
    assert got["running"] == ("run",) and got["it's"] == ("it", "s") and got[""] == ()
    assert stems.of(["running", "walked"]) == {"running": ("run",), "walked": ("walk",)}  # kept, and asked anew


def test_long_words_are_stemmed_but_not_kept() -> None:
    stems = fts_memory.Stems()
    long = "configurations" * 10
    assert stems.of([long, "configurations"]) == {long: (long,), "configurations": ("configur",)}
    assert long not in stems._known and "configurations" in stems._known
