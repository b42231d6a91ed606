"""A big project held as arrays ranks exactly as FTS5's own statements rank it.

SQLite's recall ranks a project of more than HELD_ROWS entries with FTS5
statements until a copy of its index, loaded on a worker thread, is held as
arrays (`gateway.store.fts_arrays`, `gateway.store.bm25_arrays`); from then
on with the copy, while the index keeps the copy's version.  Here both run
on the same snapshot of the same file: the evaluation set and ~2,200
synthetic entries of its own words in one project (phrases past
COMMON_ROWS with and without a kind filter, so FTS5's pruning, the AND of
common words and its fallback, one ranking and two fused ones; phrases of
several tokens, which stay with FTS5; expired entries), every question on
every rung of the ladder but prefix matching, with and without `kind=`.
Then the copy follows the index, and stays within its bounds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from gateway.hub import Hub
from gateway.recall.search import COMMON_ROWS, LADDER, Ranking
from gateway.store import bm25_arrays, fts_arrays, fts_counts
from gateway.store.search_index import SqliteFtsIndex
from tests.support.ranking_parity import compare_rankings
from tests.unit.recall.test_recall_parity_big import Side, evaluation_pool, held_parity_questions

NOW = 1_800_000_000.0
LIMIT = 20
RANKINGS = [r for r in LADDER if not r.prefix]


@pytest.fixture
async def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Side, list[str]]]:
    # Each new version loads at once (the waits have their own test below).
    monkeypatch.setattr(fts_arrays, "LOAD_SHARE", 1.0)
    monkeypatch.setattr(fts_arrays, "STABLE_FOR", 0.0)
    async with evaluation_pool(tmp_path / "arrays.db") as pool:
        yield pool


def _copies(hub: Hub) -> fts_arrays.ArrayTables:
    return hub.driver._phrase_counts.array_tables  # type: ignore[attr-defined]


async def _loaded(hub: Hub) -> None:
    await hub.driver.copies_loaded()  # type: ignore[attr-defined]


def _frozen_clock(copies: fts_arrays.ArrayTables, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The copies' clock, moved by the test: `now[0] += seconds`."""
    now = [1000.0]
    monkeypatch.setattr(copies, "_clock", lambda: now[0])
    return now


async def _new_version(side: Side) -> None:
    """A promotion: a new version of the project's index, found at once (by FTS5)."""
    entry, _ = await side.hub.knowledge.learn(side.owner, "fact", "Zyxwvut needs the flux capacitor.", None)
    await side.hub.knowledge.confirm(side.owner, entry.id)
    assert await side.search("zyxwvut", None, RANKINGS[-1]) != []


async def _held_copy(side: Side) -> bm25_arrays.ArrayTable:
    """Ask once (which starts the load), wait for it, and return the copy."""
    await side.search("warm", None, RANKINGS[-1])
    await _loaded(side.hub)

    async def unit(q: Any) -> bm25_arrays.ArrayTable | None:
        table = SqliteFtsIndex.table(side.project_id)
        known = await q.tx.phrase_counts.table(q.tx, table)
        return q.tx.phrase_counts.arrays(table, known)

    copy = await side.hub.driver.read(unit)
    assert copy is not None, "no copy held after the load"
    return copy


async def test_a_project_held_as_arrays_ranks_as_fts5_does(
    pool: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    side, hot = pool
    copy = await _held_copy(side)
    assert copy.rows > 2 * COMMON_ROWS
    ranked_by_arrays = []
    real = bm25_arrays.ranking

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        ranked_by_arrays.append(out is not None)
        return out

    monkeypatch.setattr(bm25_arrays, "ranking", counted)

    async def pair(text: str, kind: str | None, ranking: Ranking) -> tuple[list[Any], list[Any]]:
        by_arrays = await side.search(text, kind, ranking)
        with monkeypatch.context() as patch:  # FTS5's statements, on the same file
            patch.setattr(fts_counts.PhraseCounts, "arrays", lambda *a: None)
            return by_arrays, await side.search(text, kind, ranking)

    compared = await compare_rankings(held_parity_questions(hot), RANKINGS, pair, LIMIT)
    assert not compared.differ, f"{len(compared.differ)} of {compared.asked} searches differ, first: {compared.differ[:3]}"
    assert compared.fused > compared.asked // 4 and compared.empty > 0
    # Most questions were ranked by the copy; those with a phrase of several
    # tokens (`it's`, `uv.lock`) were left to FTS5.
    assert sum(ranked_by_arrays) > 0.8 * len(ranked_by_arrays)
    assert not all(ranked_by_arrays)


async def test_the_copy_follows_the_index(pool: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    side, _ = pool
    hub, owner = side.hub, side.owner
    question = "quasar flux capacitor calibration"
    await _held_copy(side)
    used: list[bytes] = []
    real = bm25_arrays.ranking

    def spied(table: bm25_arrays.ArrayTable, *args: Any, **kwargs: Any) -> Any:
        used.append(table.version)
        return real(table, *args, **kwargs)

    monkeypatch.setattr(bm25_arrays, "ranking", spied)

    async def ask(now: float = NOW) -> list[int]:
        async def unit(q: Any) -> list[tuple[int, float]]:
            return await q.index.search(side.project_id, question, None, LIMIT, now)

        return [seq for seq, _ in await hub.driver.read(unit)]

    async def ask_settled(now: float = NOW) -> list[int]:
        """Asked at once (FTS5, while the new version loads), then by the copy."""
        first = await ask(now)
        await _loaded(hub)
        used.clear()
        second = await ask(now)
        assert used, "the copy of the new version was not used"
        assert first == second
        return second

    assert await ask() == [] and used
    entry, _ = await hub.knowledge.learn(owner, "fact", "The quasar flux capacitor needs calibration weekly.", None)
    assert await ask_settled() == []  # a candidate is not in the index
    await hub.knowledge.confirm(owner, entry.id)
    used.clear()
    assert await ask() == [entry.seq]  # at once, before any copy of the new version
    assert not used
    assert await ask_settled() == [entry.seq]
    await hub.knowledge.set_expiry(owner, entry.id, expires_at=NOW + 60.0)
    assert await ask_settled(NOW + 59.0) == [entry.seq]
    assert await ask(NOW + 61.0) == []
    await hub.knowledge.retire(owner, entry.id, "no longer true")
    assert await ask() == []
    assert await ask_settled() == []


async def test_the_copies_stay_within_their_bounds(
    pool: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    side, hot = pool
    copies = _copies(side.hub)
    monkeypatch.setattr(fts_arrays, "ARRAY_ROWS", 1000)  # the project is bigger: never loaded
    await side.search(" ".join(hot[:3]), None, RANKINGS[-1])
    assert not copies._loading and not copies._held
    monkeypatch.setattr(fts_arrays, "ARRAY_ROWS", 1_000_000)
    monkeypatch.setattr(fts_arrays, "ARRAY_BYTES", 100_000)  # loaded, but too big to keep
    await side.search(" ".join(hot[:3]), None, RANKINGS[-1])
    await _loaded(side.hub)
    assert not copies._held and copies._bytes == 0
    await side.search(" ".join(hot[:3]), None, RANKINGS[-1])
    assert not copies._loading  # too big at this version: not read again and again
    monkeypatch.setattr(fts_arrays, "ARRAY_BYTES", 64 << 20)
    copies._failed.clear()  # as a new version of the index would
    copy = await _held_copy(side)
    assert copies._bytes == copy.nbytes > copy.instances.nbytes
    assert copy.tokens == int(copy.lengths.sum())


async def test_a_database_in_memory_stays_on_fts5() -> None:
    copies = fts_arrays.ArrayTables(":memory:")
    assert copies.get("fts_p1", b"v", 5000) is None and not copies._loading
    await copies.close()


async def test_a_version_is_loaded_once_it_has_settled(
    pool: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    side, _ = pool
    copies = _copies(side.hub)
    now = _frozen_clock(copies, monkeypatch)
    monkeypatch.setattr(fts_arrays, "STABLE_FOR", 1.0)
    await side.search("warm", None, RANKINGS[-1])
    now[0] += 0.9
    await side.search("warm", None, RANKINGS[-1])
    assert not copies._loading and not copies._held  # seen for 0.9 s only
    now[0] += 0.1
    first = await _held_copy(side)
    await _new_version(side)
    now[0] += 0.9
    await side.search("warm", None, RANKINGS[-1])
    assert not copies._loading
    now[0] += 0.1
    assert (await _held_copy(side)).version != first.version


async def test_loads_take_at_most_their_share_of_the_time(
    pool: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    side, _ = pool
    copies = _copies(side.hub)
    now = _frozen_clock(copies, monkeypatch)
    monkeypatch.setattr(fts_arrays, "LOAD_SHARE", 0.1)
    first = await _held_copy(side)
    assert copies._resume_at > now[0]  # nine times the load's own duration
    await _new_version(side)
    assert not copies._loading  # within the wait: FTS5 ranks, nothing loads
    now[0] = copies._resume_at
    assert (await _held_copy(side)).version != first.version


async def test_a_load_that_fails_leaves_the_project_to_fts5(
    pool: tuple[Side, list[str]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    side, hot = pool
    copies = _copies(side.hub)
    question = " ".join(hot[:3])

    def broken(conn: Any, table: str) -> Any:
        raise RuntimeError("the two vocabularies disagree")

    monkeypatch.setattr(fts_arrays, "read", broken)
    expected = await side.search(question, None, RANKINGS[-1])  # by FTS5; the load starts
    await _loaded(side.hub)
    assert not copies._held and copies._failed
    assert "not held as arrays" in caplog.text
    assert await side.search(question, None, RANKINGS[-1]) == expected
    assert not copies._loading  # not tried again at this version


def test_numpy_is_imported_by_the_first_load_only() -> None:
    """A gateway whose projects are all small never pays for numpy (about
    11 MB resident, and its import time at every CLI command)."""
    import subprocess
    import sys

    code = ("import sys, gateway.web.app, gateway.hub, gateway.cli.main, gateway.store.search_index; "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
