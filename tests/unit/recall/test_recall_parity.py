"""SQLite and PostgreSQL give the same answers on the evaluation set.

Every entry of bench/recall_eval/ goes into a SQLite hub and a PostgreSQL
hub through the real core (learn, confirm), once per project and once all
in one project (the pooled index); then every question is asked of both
indexes, with every ranking of the evaluation ladder but prefix matching
(which PostgreSQL ranks with ts_rank: gateway/store/pg_prefix_ranking.py)
and with a kind filter.  The two must return the same entries in the same
order with the same scores (FTS5's bm25, computed on PostgreSQL by
gateway/store/bm25.py), and so the same fused recall: with a semantic model
(RELAYROOM_TEST_SEMANTIC_MODEL), `Recall.recall` over the per-project
indexes is compared too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from bench.recall_quality import load
from gateway.core.clock import ManualClock
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from gateway.recall.search import LADDER, Ranking
from tests.support.ranking_parity import difference

NOW = 1_800_000_000.0
LIMIT = 20
RANKINGS = [r for r in LADDER if not r.prefix]  # the last is recall's (asked with kind= too)
MODEL = os.environ.get("RELAYROOM_TEST_SEMANTIC_MODEL")
SHA256 = os.environ.get("RELAYROOM_TEST_SEMANTIC_SHA256")


class Side:
    """One store holding the evaluation set: eval id by seq, owner by project."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.names: dict[int, str] = {}
        self.owners: dict[str, Principal] = {}

    async def fill(self, entries: dict[str, list[dict[str, Any]]], pooled: bool) -> None:
        pool = await self.hub.accounts.create_project("pool") if pooled else None
        for slug, items in entries.items():
            project = pool or await self.hub.accounts.create_project(slug)
            owner = Principal(project=project, name="eval-owner", level="owner")
            self.owners[slug] = owner
            for item in items:
                entry, _ = await self.hub.knowledge.learn(owner, item["kind"], item["statement"], item.get("evidence"))
                await self.hub.knowledge.confirm(owner, entry.id)
                self.names[entry.seq] = item["id"]
        if self.hub.recall.semantic is not None:
            await self.hub.recall.semantic.fill_all(self.hub.driver)

    async def search(self, slug: str, text: str, kind: str | None, ranking: Ranking) -> list[tuple[str, float]]:
        project_id = self.owners[slug].project.id

        async def unit(q: Any) -> list[tuple[int, float]]:
            return await q.index.search(project_id, text, kind, LIMIT, NOW, ranking=ranking)

        return [(self.names[seq], score) for seq, score in await self.hub.driver.read(unit)]

    async def recall(self, slug: str, text: str) -> list[tuple[str, float]]:
        _, results = await self.hub.recall.recall(self.owners[slug], text, limit=10)
        return [(self.names[e.seq], s) for e, s in results]


async def _side(url: str, pooled: bool, semantic: bool) -> Side:
    settings: dict[str, Any] = {"semantic_model": MODEL, "semantic_model_sha256": SHA256} if semantic else {}
    config = Config.from_env({}, database_url=url, sweep_interval=0.0, recalls_per_hour=1_000_000, **settings)
    hub = Hub(config, clock=ManualClock(start=NOW - 3600))
    await hub.start(background=False)
    side = Side(hub)
    entries, _ = load()
    await side.fill(entries, pooled)
    return side


@pytest.fixture(params=["per_project", "pooled"])
async def sides(request: Any, tmp_path: Path) -> AsyncIterator[tuple[Side, Side]]:
    from tests.support.pg import fresh_database

    pooled = request.param == "pooled"
    semantic = bool(MODEL) and not pooled  # the fused recall once (embedding is most of the time), as served
    with fresh_database() as url:
        lite = await _side(f"sqlite:///{tmp_path / 'eval.db'}", pooled, semantic)
        pg = await _side(url, pooled, semantic)
        try:
            yield lite, pg
        finally:
            await lite.hub.stop()
            await pg.hub.stop()


@pytest.mark.postgres
async def test_both_stores_rank_and_recall_the_evaluation_set_alike(sides: tuple[Side, Side]) -> None:
    lite, pg = sides
    _, queries = load()
    differ = []
    asked = 0
    for query in queries:
        slug = query.project  # in the pooled index, every project's owner is the pool's
        for ranking in RANKINGS:
            for kind in (None, "convention", "pitfall") if ranking is RANKINGS[-1] else (None,):
                a = await lite.search(slug, query.text, kind, ranking)
                b = await pg.search(slug, query.text, kind, ranking)
                asked += 1
                found = difference(a, b, query.text, ranking.name, kind)
                if found is not None:
                    differ.append(found)
    assert asked == len(queries) * (len(RANKINGS) + 2)
    assert not differ, f"{len(differ)} of {asked} searches differ, first: {differ[:3]}"
    if lite.hub.recall.semantic is None:
        return  # lexical only (pooled, or no RELAYROOM_TEST_SEMANTIC_MODEL): the fused recall is not compared
    for query in queries:
        a = await lite.recall(query.project, query.text)
        b = await pg.recall(query.project, query.text)
        if [n for n, _ in a] != [n for n, _ in b] or any(not math.isclose(x, y, rel_tol=1e-6) for (_, x), (_, y) in zip(a, b)):
            differ.append((query.text, a[:3], b[:3]))
    assert not differ, f"{len(differ)} of {len(queries)} recalls differ, first: {differ[:3]}"
