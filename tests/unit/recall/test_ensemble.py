"""Two models read together (all-MiniLM-L6-v2 and its companion,
multilingual-e5-small), on both stores: a paraphrase the first model alone
misses, the similarity scaled over the rows a question may see, the first
model alone when the companion cannot run, and the vectors embedded again
when the models in force change."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, AsyncIterator

import numpy
import pytest
import yaml

from gateway.core.clock import ManualClock
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from gateway.recall import ensemble, model, semantic
from gateway.recall.model import ModelUnavailable
from tests.conftest import make_project

# A project of the evaluation set (bench/recall_eval.py), and one of its dev
# questions: MiniLM alone ranks "Documentation lines wrap at 79 characters"
# first; the two models together find the pitfall about cosmetic PRs.
DJANGO = Path(__file__).resolve().parents[3] / "bench" / "recall_eval" / "django.yaml"
QUESTION = "is a pure style cleanup PR welcome"

def _companion_installed() -> bool:
    try:
        return model.companion(None) is not None
    except ModelUnavailable:
        return False


pair_only = pytest.mark.skipif(not _companion_installed(), reason="the companion model's files are not installed")


async def _hub(database_url: str, tmp_path: Path, pair: bool = True) -> Hub:
    config = Config.from_env(
        {}, database_url=database_url, checkmaps=str(tmp_path), sweep_interval=0.0, semantic_pair=pair
    )
    hub = Hub(config, clock=ManualClock(start=time.time()))
    await hub.start(background=False)
    return hub


@pytest.fixture
async def stores(database_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    """Opens hubs on the test's one database, one after the other, and stops the last."""
    opened: list[Hub] = []

    async def open_hub() -> Hub:
        if opened:
            await opened.pop().stop()
        opened.append(await _hub(database_url, tmp_path))
        return opened[-1]

    yield open_hub
    for hub in opened:
        await hub.stop()


async def _django(hub: Hub) -> tuple[Principal, dict[str, str]]:
    await make_project(hub, "django")
    owner = Principal(project=await hub.accounts.project("django"), name="olivia", level="owner")
    ids = {}
    for item in yaml.safe_load(DJANGO.read_text())["entries"]:
        entry, _ = await hub.knowledge.learn(owner, item["kind"], item["statement"], item.get("evidence"))
        await hub.knowledge.confirm(owner, entry.id)
        ids[entry.id] = item["id"]
    return owner, ids


async def _first(hub: Hub, owner: Principal, ids: dict[str, str], question: str = QUESTION) -> str:
    _, found = await hub.recall.recall(owner, question)
    return ids[found[0][0].id]


async def _rows(hub: Hub) -> set[tuple[str, int]]:
    rows = await hub.driver.read(lambda q: q.tx.all("SELECT model, vector FROM entry_vectors"))
    return {(r["model"], len(bytes(r["vector"])) if r["vector"] is not None else 0) for r in rows}


@pair_only
async def test_two_models_find_a_paraphrase_the_first_alone_misses(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = await stores()
    stage = hub.recall.semantic
    assert stage is not None and len(stage.encoder.encoders) == 2
    # The second model runs on another thread: its half still comes second.
    one, two = stage.encoder.encoders
    assert numpy.array_equal(stage.encoder.query(QUESTION), numpy.concatenate(
        [one.encode([one.query_prefix + QUESTION])[0], two.encode([two.query_prefix + QUESTION])[0]]))
    owner, ids = await _django(hub)
    assert await stage.fill_all(hub.driver) == 20
    assert await _first(hub, owner, ids) == "dj20"
    _, pair = await hub.recall.recall(owner, QUESTION)

    monkeypatch.setattr(semantic, "companion", lambda setting: None)
    alone = await stores()
    assert alone.recall.semantic is not None and await alone.recall.semantic.fill_all(alone.driver) == 20
    assert await _first(alone, owner, ids) == "dj17"
    # The pair's confidence reads the second model's best cosine under the
    # pair's constants; alone, MiniLM's under its own: two readings.
    _, found = await alone.recall.recall(owner, QUESTION)
    assert found[0][1] != pytest.approx(pair[0][1], abs=1e-3)


@pair_only
async def test_switching_models_embeds_every_entry_again_and_keeps_the_first_models_vectors_valid(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model id names every model in force: a vector of another id is a
    placeholder to the fill job, so a switch refills through the same job.
    With one model the id is that model's alone, as before the pair: its
    vectors stay valid."""
    hub = await stores()
    owner, ids = await _django(hub)
    assert hub.recall.semantic is not None
    pair = hub.recall.semantic.model_id
    first, second = (e.model_id for e in hub.recall.semantic.encoder.encoders)
    assert pair == f"{first}+{second}"
    await hub.recall.semantic.fill_all(hub.driver)
    assert await _rows(hub) == {(pair, 768 * 4)}

    monkeypatch.setattr(semantic, "companion", lambda setting: None)
    hub = await stores()
    assert hub.recall.semantic is not None and hub.recall.semantic.model_id == first
    # Until the fill job runs, no vector is the model's: recall is lexical, not wrong.
    _, found = await hub.recall.recall(owner, "run only part of the test suite")
    assert ids[found[0][0].id] == "dj04"
    assert await hub.recall.semantic.fill_all(hub.driver) == 20
    assert await _rows(hub) == {(first, 384 * 4)}
    hub = await stores()
    assert hub.recall.semantic is not None and await hub.recall.semantic.fill_all(hub.driver) == 0

    monkeypatch.undo()
    hub = await stores()
    assert hub.recall.semantic is not None and hub.recall.semantic.model_id == pair
    assert await hub.recall.semantic.fill_all(hub.driver) == 20
    assert await _rows(hub) == {(pair, 768 * 4)} and await _first(hub, owner, ids) == "dj20"


async def test_the_first_model_ranks_alone_when_the_companion_cannot_run(
    stores: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unavailable(setting: str | None) -> Any:
        raise ModelUnavailable("/nowhere/model.onnx does not exist")

    monkeypatch.setattr(semantic, "companion", unavailable)
    caplog.set_level("WARNING", logger="relayroom")
    hub = await stores()
    stage = hub.recall.semantic
    assert stage is not None and hub.recall.status.ranking == "fused"
    assert hub.recall.status.detail.endswith("; second model not used: /nowhere/model.onnx does not exist")
    assert [r.levelno for r in caplog.records if "second model" in r.getMessage()] == [logging.WARNING]
    assert len(stage.encoder.encoders) == 1 and stage.model_id == stage.encoder.encoders[0].model_id
    owner, ids = await _django(hub)
    await stage.fill_all(hub.driver)
    assert await _rows(hub) == {(stage.model_id, 384 * 4)}
    assert await _first(hub, owner, ids) == "dj17"  # MiniLM's own answer, as before the pair


@pair_only
async def test_readyz_names_both_models(stores: Any) -> None:
    import httpx

    from gateway.web.app import build_app

    hub = await stores()
    app = build_app(hub, manage_hub=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750") as client:
        detail = (await client.get("/readyz")).json()["recall"]["detail"]
    assert detail.startswith("fused lexical + semantic (all-MiniLM-L6-v2") and detail.count("sha256") == 2
    assert "e5" in detail and "not used" not in detail


def test_each_models_cosines_are_scaled_between_the_median_and_the_best_of_the_rows_allowed() -> None:
    """Checked by hand: rows of (first model, second model) cosines."""
    cosines = numpy.array([[0.6, 0.90], [0.2, 0.86], [0.1, 0.80], [0.4, 0.84]], numpy.float32).T
    similarity, first, last = ensemble.combined(cosines)
    assert last.tolist() == cosines[1].tolist()
    # medians 0.3 and 0.85, bests 0.6 and 0.9: row 0 is best on both.
    assert numpy.allclose(similarity, [1.0, (0 + 0.2) / 2, 0.0, (1 / 3 + 0) / 2], atol=1e-5)
    assert first.tolist() == cosines[0].tolist()
    # Rows 1 and 2 only (a kind filter): their own median and best.
    similarity, _, _ = ensemble.combined(cosines, numpy.array([False, True, True, False]))
    assert numpy.allclose(similarity[1:3], [1.0, 0.0], atol=1e-5)
    # One row, or a model whose rows are all alike, tells nothing apart: 1.
    assert ensemble.combined(cosines[:, :1])[0].tolist() == [1.0]
    # One model: its cosines, unscaled.
    alone, raw, sure = ensemble.combined(cosines[:1])
    assert alone is raw is sure and alone.tolist() == cosines[0].tolist()


def test_nearest_reads_the_first_models_cosines_and_ranks_by_both() -> None:
    """The lexical weight's two best cosines are the first model's, the
    confidence's best cosine the second's, over the rows of the kind asked;
    the ranking is by the similarity of both."""
    rows = numpy.array([[0.6, 0.80], [0.5, 0.95], [0.1, 0.70], [0.3, 0.75], [0.2, 0.90]], numpy.float32).T
    vectors = semantic.ProjectVectors(0, numpy.arange(1, 6), ["fact", "pitfall", "fact", "pitfall", "pitfall"],
                                      None, widths=(1, 1))
    cosine, top, sure, _ = semantic.nearest(vectors, None, None, 2, per_model=rows)
    assert list(cosine) == [2, 1] and numpy.allclose(top, [0.6, 0.5]) and numpy.isclose(sure, 0.95)
    cosine, top, sure, similarity = semantic.nearest(vectors, None, "fact", 5, per_model=rows)
    assert numpy.allclose(top, [0.6, 0.1]) and numpy.isclose(sure, 0.80)
    cosine, top, sure, similarity = semantic.nearest(vectors, None, "pitfall", 5, per_model=rows)
    assert set(cosine) == {2, 4, 5} and numpy.allclose(top, [0.5, 0.3]) and numpy.isclose(sure, 0.95)
    assert similarity[0] == similarity[2] == -1.0
    # Over the pitfalls only: medians 0.3 and 0.9, bests 0.5 and 0.95.
    assert numpy.isclose(cosine[2], 1.0) and numpy.isclose(cosine[5], 0.0) and numpy.isclose(cosine[4], 0.0)
    # A kind no row has: nothing near, and no cosine for the confidence to read.
    cosine, top, sure, _ = semantic.nearest(vectors, None, "decision", 5, per_model=rows)
    assert cosine == {} and sure == -1.0


@pair_only
async def test_a_plain_start_ranks_with_the_installed_model_alone(database_url: str, tmp_path: Path) -> None:
    """The pair is asked for (RELAYROOM_SEMANTIC_PAIR): with its package
    installed but the setting unset, one model, its own id and answers."""
    hub = await _hub(database_url, tmp_path, pair=False)
    try:
        assert hub.recall.semantic is not None and "+" not in hub.recall.semantic.model_id
        assert "e5" not in hub.recall.status.detail
        owner, ids = await _django(hub)
        await hub.recall.semantic.fill_all(hub.driver)
        assert await _first(hub, owner, ids) == "dj17"  # MiniLM's own answer
    finally:
        await hub.stop()
