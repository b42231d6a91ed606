"""SQLite and PostgreSQL give the same answers on a project past 1,000 entries.

The whole evaluation set goes into one project of each store through the
real core (learn, confirm), and then the same ~2,200 synthetic entries
through a bulk path each store takes the same way (the entries' rows, then
the index rows, with the index's own `add_many`).  The synthetic entries are made of the evaluation's own words,
a few of them in most rows and most rows of kind `convention`, so that many
questions have phrases past COMMON_ROWS, with and without a kind filter
(SQLite's pruning), some have only such words (the AND of the agent's
words, and its fallback to OR), and some phrases are of several lexemes
(`project's`, `don't`); a few entries are expired, and most of those
holding one word (recall looks further down).  Every question must get the same entries, in the same order, with
the same scores (FTS5's bm25) from both stores.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from bench.recall_quality import load
from gateway.core.clock import ManualClock
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from gateway.knowledge.trust import normalise_statement
from gateway.recall.search import COMMON_ROWS, LADDER, Ranking, words
from tests.support.ranking_parity import difference

NOW = 1_800_000_000.0
LIMIT = 20
PADDING = 2_200
RANKINGS = [r for r in LADDER if not r.prefix]
EXTRA_QUESTIONS = [
    "uv.lock",
    "don't commit the project's uv.lock by hand",
    "what's the project's test config?",
    "zzzqx",
    "tortoise hare",
    "quokka",
    "quokka tortoise",
]


def held_parity_questions(hot: list[str]) -> list[str]:
    """The evaluation's questions, the extra ones, questions of only the
    padding's common words, and edge cases (empty, stop words only,
    diacritics and an apostrophe, a word past FTS5's 64 characters)."""
    _, queries = load()
    return [q.text for q in queries] + EXTRA_QUESTIONS + [
        " ".join(hot[:2]), " ".join(hot[:4]), hot[0], f"{hot[1]} {hot[2]} migrations", f"why {hot[0]} {hot[3]}?",
        "", "the and of", "naïve ÜBER-config it's", "x" * 70,
    ]


def _padding(
    entries: dict[str, list[dict[str, Any]]], hot: list[str], count: int = PADDING
) -> list[tuple[str, str | None, str, float | None]]:
    """(statement, evidence, kind, expires_at) of the synthetic entries."""
    rng = random.Random(5)
    vocabulary = sorted({w for items in entries.values() for item in items for w in words(item["statement"]) if len(w) > 2})
    kinds = ["convention"] * 13 + ["pitfall"] * 4 + ["fact", "decision", "fact"]
    out: list[tuple[str, str | None, str, float | None]] = []
    for n in range(count):
        picked = [w for w in hot if rng.random() < 0.8]
        picked += [vocabulary[int(rng.paretovariate(0.7)) % len(vocabulary)] for _ in range(rng.randint(3, 10))]
        if n % 97 == 0:
            picked += ["don't", "edit", "the", "project's", "uv.lock"]
        # Two words past COMMON_ROWS never together (their AND is empty: OR).
        picked.append("tortoise" if n % 2 else "hare")
        if n % 25 == 0:
            picked.append("quokka")  # mostly expired: recall looks further down
        rng.shuffle(picked)
        statement = " ".join(picked).capitalize() + "."
        evidence = " ".join(rng.sample(vocabulary, 4)) if n % 3 == 0 else None
        expires = NOW - 60.0 if n % 23 == 0 or (n % 25 == 0 and n % 150) else None
        out.append((statement, evidence, kinds[n % len(kinds)], expires))
    return out


class Side:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.names: dict[int, str] = {}
        self.project_id = 0

    async def fill(self, entries: dict[str, list[dict[str, Any]]], padding: list[tuple[str, str | None, str, float | None]]) -> None:
        project = await self.hub.accounts.create_project("pool")
        self.project_id = project.id
        self.owner = owner = Principal(project=project, name="eval-owner", level="owner")
        for items in entries.values():
            for item in items:
                entry, _ = await self.hub.knowledge.learn(owner, item["kind"], item["statement"], item.get("evidence"))
                await self.hub.knowledge.confirm(owner, entry.id)
                self.names[entry.seq] = item["id"]

        async def unit(q: Any) -> None:
            top = await q.tx.one("SELECT COALESCE(MAX(seq), 0) AS s FROM entries")
            first = int(top["s"]) + 1
            await q.tx.run_many(
                "INSERT INTO entries (id, project_id, kind, statement, evidence, norm_statement, state, created_at, "
                "created_by, created_via, expires_at, promoted_at, promoted_by, provenance) "
                "VALUES (?, ?, ?, ?, ?, ?, 'trusted', ?, 'test', 'learn', ?, ?, 'owner:test', NULL)",
                [(f"kn_pad_{n}", project.id, kind, s, e, normalise_statement(s), NOW - 3600, x, NOW - 3600)
                 for n, (s, e, kind, x) in enumerate(padding)],
            )
            written = await q.tx.all(
                "SELECT seq, kind, statement, evidence, expires_at FROM entries WHERE project_id = ? AND seq >= ? ORDER BY seq",
                project.id, first,
            )
            assert len(written) == len(padding)
            await q.index.add_many(project.id, [
                (r["seq"], r["kind"], r["expires_at"], r["statement"], r["evidence"]) for r in written
            ])

        await self.hub.driver.write(unit)

    async def search(self, text: str, kind: str | None, ranking: Ranking) -> list[tuple[str, float]]:
        async def unit(q: Any) -> list[tuple[int, float]]:
            return await q.index.search(self.project_id, text, kind, LIMIT, NOW, ranking=ranking)

        return [(self.names.get(seq, f"pad-{seq}"), score) for seq, score in await self.hub.driver.read(unit)]


async def _side(url: str, entries: Any, padding: Any) -> Side:
    config = Config.from_env({}, database_url=url, sweep_interval=0.0, recalls_per_hour=1_000_000)
    hub = Hub(config, clock=ManualClock(start=NOW - 3600))
    await hub.start(background=False)
    side = Side(hub)
    await side.fill(entries, padding)
    return side


@contextlib.asynccontextmanager
async def evaluation_pool(path: Path, padding: int = PADDING) -> AsyncIterator[tuple[Side, list[str]]]:
    """A SQLite hub at `path` whose one project holds the evaluation set and
    `padding` synthetic entries of its words; with the padding's common words."""
    entries, queries = load()
    hot = _hot(queries)
    config = Config.from_env({}, database_url=f"sqlite:///{path}", sweep_interval=0.0, recalls_per_hour=1_000_000)
    hub = Hub(config, clock=ManualClock(start=NOW - 3600))
    await hub.start(background=False)
    try:
        side = Side(hub)
        await side.fill(entries, _padding(entries, hot, count=padding))
        yield side, hot
    finally:
        await hub.stop()


def _hot(queries: list[Any]) -> list[str]:
    """The content words most questions use: made common by the padding."""
    from gateway.recall.search import terms

    counted = Counter(w for q in queries for w in terms(q.text))
    return [w for w, _ in counted.most_common(12)]


@pytest.fixture
async def sides(tmp_path: Path) -> AsyncIterator[tuple[Side, Side, list[str]]]:
    from tests.support.pg import fresh_database, server_url

    server_url()  # skips without a server
    entries, queries = load()
    hot = _hot(queries)
    padding = _padding(entries, hot)
    with fresh_database() as url:
        lite = await _side(f"sqlite:///{tmp_path / 'big.db'}", entries, padding)
        pg = await _side(url, entries, padding)
        try:
            yield lite, pg, hot
        finally:
            await lite.hub.stop()
            await pg.hub.stop()


@pytest.mark.postgres
async def test_both_stores_rank_a_project_past_common_rows_alike(sides: tuple[Side, Side, list[str]]) -> None:
    lite, pg, hot = sides
    _, queries = load()
    # The padding does what it is for: words past COMMON_ROWS, in all and in one kind.
    from gateway.store import search_postgres as sp

    df, (rows, _) = await pg.hub.driver.read(lambda q: sp.counts(q.tx, pg.project_id))
    assert rows > 2 * COMMON_ROWS
    assert sum(1 for (_, kind), n in df.items() if kind == "convention" and n > COMMON_ROWS) >= 3
    questions = [q.text for q in queries] + EXTRA_QUESTIONS + [
        " ".join(hot[:2]), " ".join(hot[:4]), hot[0], f"{hot[1]} {hot[2]} migrations", f"why {hot[0]} {hot[3]}?",
    ]
    differ = []
    asked = 0
    for text in questions:
        for ranking in RANKINGS:
            for kind in (None, "convention", "pitfall") if ranking is RANKINGS[-1] else (None,):
                a = await lite.search(text, kind, ranking)
                b = await pg.search(text, kind, ranking)
                asked += 1
                found = difference(a, b, text, ranking.name, kind)
                if found is not None:
                    differ.append(found)
    assert not differ, f"{len(differ)} of {asked} searches differ, first: {differ[:3]}"
