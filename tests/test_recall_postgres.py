"""PostgreSQL recall on big projects: a bounded candidate set chosen from the
table's statistics (`gateway.store.search_postgres`).

The choice itself is pure and tested without a database; the rest runs
against a real server (skipped without one, like every PostgreSQL test):
a small table and a big table whose question holds few rows are ranked
whole, exactly as "rank every match" ranks them; a big table without
statistics is ranked whole too; with statistics, the entry holding the
rare word comes first, common words still bring an answer, and a rare word
that holds nothing does not empty the list."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.hub import Hub
from gateway.model import Principal
from gateway.search import DEFAULT_RANKING, Candidate, Phrase, plan_query, rerank
from gateway.store import search_postgres as sp
from tests.conftest import ProjectTokens

NOW = 1_800_000_000.0


def _phrases(*items: tuple[str, int]) -> tuple[Phrase, ...]:
    return tuple(Phrase(text, weight, False, expansion=weight == 1) for text, weight in items)


# -- the choice, pure ------------------------------------------------------------------


def test_few_matching_rows_are_ranked_whole() -> None:
    phrases = _phrases(("deploy", 4), ("midnight", 4))
    assert sp.select(phrases, {"deploy": 600.0, "midnight": 300.0}, 100_000.0, budget=1000) is None


def test_the_rarest_words_per_unit_of_weight_bring_the_rows_in() -> None:
    phrases = _phrases(("deploy", 4), ("logs", 4), ("midnight", 4), ("release", 1), ("nightly", 1))
    rows = {"deploy": 9000.0, "logs": 2400.0, "midnight": 40.0, "release": 700.0, "nightly": 300.0}
    chosen = sp.select(phrases, rows, 100_000.0, budget=1000)
    assert chosen is not None
    # midnight (40/4) and nightly (300/1) fit; logs (2400) and release (700 more: 1040) do not.
    assert [p.text for p in chosen.rare] == ["midnight", "nightly"]
    assert [p.text for p in chosen.common] == ["logs", "deploy"]  # the agent's words left out, rarest first
    assert not chosen.now  # one of the agent's words is rare: the common ones only fill up
    assert chosen.every  # 9000 x 2400 / 100k: about 216 rows hold both, few enough to rank
    assert sp.select(phrases, rows, 100_000.0, budget=300) is not None


def test_when_every_word_of_the_agent_is_common_its_rows_compete_at_once() -> None:
    phrases = _phrases(("deploy", 4), ("logs", 4), ("pipeline", 1))
    rows = {"deploy": 9000.0, "logs": 2400.0, "pipeline": 100.0}
    chosen = sp.select(phrases, rows, 100_000.0, budget=1000)
    assert chosen is not None and chosen.now
    assert [p.text for p in chosen.rare] == ["pipeline"]
    assert [p.text for p in chosen.common] == ["logs", "deploy"]
    assert chosen.every  # about 216 rows hold both words: the AND is worth ranking
    lone = sp.select(_phrases(("tests", 4)), {"tests": 30_000.0}, 100_000.0, budget=1000)
    assert lone is not None and lone.now and not lone.every and [p.text for p in lone.common] == ["tests"]


def test_phrases_of_stop_words_are_left_out_and_synonyms_stand_in_when_no_word_is_left() -> None:
    phrases = _phrases(("the", 4), ("db", 1), ("database", 1))
    chosen = sp.select(phrases, {"the": 0.0, "db": 5000.0, "database": 8000.0}, 100_000.0, budget=1000)
    assert chosen is not None and chosen.rare == () and chosen.now
    assert [p.text for p in chosen.common] == ["db", "database"]


def test_filling_rows_rank_below_every_row_that_holds_a_rare_word() -> None:
    ranked = [Candidate(1, 0.9, "fact"), Candidate(2, 0.3, "fact")]
    more = [Candidate(3, 1.2, "fact"), Candidate(4, 0.6, "pitfall")]
    below = sp.below(more, ranked)
    assert [c.seq for c in below] == [3, 4]
    assert max(c.score for c in below) < 0.3 and below[0].score > below[1].score
    assert sp.below([Candidate(5, 0.1, "fact")], ranked) == [Candidate(5, 0.1, "fact")]  # already below
    assert sp.below(more, []) == more


def test_the_tsquery_of_many_phrases_is_one_quoted_parameter() -> None:
    phrases = _phrases(("it's", 4), ("a|b", 4), ("x", 1))
    assert sp.tsquery_text(phrases) == "'it''s' | 'a|b' | 'x'"
    assert sp.tsquery_text(phrases, "&") == "'it''s' & 'a|b' & 'x'"


# -- through a real server ---------------------------------------------------------------

pytestmark_pg = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

RARE = "Deploy logs rotate at midnight and drop the last line."


async def _bulk(hub: Hub, project_id: int, count: int, *, analyze: bool = True) -> None:
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
            [(f"kn_bulk_{project_id}_{i}", project_id, kind, s, s.casefold(), now, now) for i, (s, kind) in enumerate(rows)],
        )
        written = await q.tx.all("SELECT seq, statement, kind FROM entries WHERE project_id = ? AND id LIKE 'kn_bulk_%'", project_id)
        await q.tx.run_many(
            f"INSERT INTO {sp.table(project_id)} (seq, kind, expires_at, tsv) VALUES (?, ?, NULL, {sp.VECTOR})",
            [(r["seq"], r["kind"], r["statement"], "", r["kind"], "") for r in written],
        )
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
    """The reference: rank every matching row, as the index did before."""
    plan = plan_query(query)
    groups = sp._groups(plan)
    ranked = sp._Ranked(sp.table(project_id), groups, DEFAULT_RANKING, kind, NOW)
    wanted = max(limit, min(60, limit * 3))
    candidates = await hub.driver.read(lambda q: ranked.best(q.tx, [ranked.matching()], wanted))
    return rerank(candidates, plan, None, limit)


async def _search(hub: Hub, project_id: int, query: str, kind: str | None = None, limit: int = 10) -> list[tuple[int, float]]:
    return await hub.driver.read(lambda q: q.index.search(project_id, query, kind, limit, NOW))


QUESTIONS = ["why do deploy logs drop a line at midnight?", "stdout", "service build 7", "rotate logs", "nothing matches zzzq"]


@pytestmark_pg
async def test_a_small_project_is_ranked_whole(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, sp.CANDIDATE_ROWS // 2)
    await _trusted(hub, "acme", "pitfall", RARE)
    await hub.driver.write(lambda q: q.tx.run(f"ANALYZE {sp.table(project.id)}"))
    for question in QUESTIONS:
        for kind in (None, "pitfall"):
            assert await _search(hub, project.id, question, kind) == await _every_match(hub, project.id, question, kind, 10)


@pytestmark_pg
async def test_a_big_project_without_statistics_is_ranked_whole(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, sp.CANDIDATE_ROWS * 3, analyze=False)
    for question in QUESTIONS:
        assert await _search(hub, project.id, question) == await _every_match(hub, project.id, question, None, 10)


@pytestmark_pg
async def test_a_big_project_ranks_the_rows_of_its_rare_words(hub: Hub, acme: ProjectTokens, monkeypatch: Any) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, sp.CANDIDATE_ROWS * 3)
    rare = await _trusted(hub, "acme", "pitfall", RARE)
    await hub.driver.write(lambda q: q.tx.run(f"ANALYZE {sp.table(project.id)}"))
    chosen: list[Any] = []
    real_select = sp.select
    monkeypatch.setattr(sp, "select", lambda *a, **k: chosen.append(real_select(*a, **k)) or chosen[-1])
    reader = await hub.accounts.authenticate(acme.reader)

    for kind in (None, "pitfall"):
        _, results = await hub.recall.recall(reader, "why do deploy logs drop a line at midnight?", kind, 5)
        assert results[0][0].id == rare
    assert chosen and chosen[-1] is not None and "midnight" in [p.text for p in chosen[-1].rare]

    # Every word common: the rows holding all of them (and the newest) still answer.
    _, common = await hub.recall.recall(reader, "deploy logs stdout", None, 5)
    assert len(common) == 5 and all("stdout" in e.statement for e, _ in common)
    assert chosen[-1] is not None and chosen[-1].now

    # A word in no row, counted as rare by the estimate: the common words fill the list, below it.
    _, filled = await hub.recall.recall(reader, "midnight zzzqx logs", None, 10)
    assert filled[0][0].id == rare and len(filled) == 10
    assert [s for _, s in filled] == sorted((s for _, s in filled), reverse=True)


@pytestmark_pg
async def test_a_big_project_with_a_question_of_rare_words_is_ranked_whole(hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    await _bulk(hub, project.id, sp.CANDIDATE_ROWS * 3)
    await _trusted(hub, "acme", "pitfall", RARE)
    await hub.driver.write(lambda q: q.tx.run(f"ANALYZE {sp.table(project.id)}"))
    for question in ("midnight rotation", "2999 1500", "line"):
        assert await _search(hub, project.id, question) == await _every_match(hub, project.id, question, None, 10)
