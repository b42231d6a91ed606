"""The optional embedding fusion: the pure fusion always, the model only where
the extra is installed (the default install and CI do not have torch)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from gateway.recall import embeddings
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from tests.conftest import ProjectTokens


def test_fusion_normalises_bm25_and_drops_vectors_that_are_only_nearest() -> None:
    fused = embeddings.fuse_scores([(1, 8.0), (2, 4.0)], {1: 0.1, 2: 0.5, 3: 0.6, 4: 0.1})
    assert fused[1] == pytest.approx(1.0)  # its cosine is below MIN_COSINE: counts 0
    assert fused[2] == pytest.approx(0.5 + embeddings.COSINE_WEIGHT * 0.5)
    assert fused[3] == pytest.approx(embeddings.COSINE_WEIGHT * 0.6)  # found by meaning alone
    assert 4 not in fused
    assert embeddings.fuse_scores([], {}) == {}


def test_install_is_a_no_op_unless_the_setting_asks(hub: Hub) -> None:
    assert embeddings.install(hub) is False
    assert embeddings.ENABLED is False


@pytest.fixture
def with_model() -> Iterator[None]:
    if not embeddings.available():
        pytest.skip("the embeddings extra is not installed (pip install -e '.[embeddings]')")
    yield
    embeddings.ENABLED = False
    embeddings.forget()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_question_sharing_no_word_finds_its_entry(with_model: Any, hub: Hub, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    owner = Principal(project=project, name="olivia", level="owner")
    ids = {}
    for kind, statement in [
        ("fact", "CODEOWNERS gives packages/ to the core team and plugins/x* to each plugin's maintainers."),
        ("convention", "The catalog descriptor file is named catalog-info.yaml."),
        ("decision", "Luxon is the single date and time library."),
    ]:
        entry, _ = await hub.knowledge.learn(owner, kind, statement)
        await hub.knowledge.confirm(owner, entry.id)
        ids[kind] = entry.id
    reader = await hub.accounts.authenticate(acme.reader)
    question = "who approves edits to the central modules?"
    _, before = await hub.recall.recall(reader, question)
    assert ids["fact"] not in [e.id for e, _ in before]  # no shared word: BM25 cannot

    assert await embeddings.fill_once(hub) == 3
    assert await embeddings.fill_once(hub) == 0
    embeddings.ENABLED = True
    _, after = await hub.recall.recall(reader, question)
    assert after and after[0][0].id == ids["fact"]
    _, filtered = await hub.recall.recall(reader, question, "decision")
    assert all(e.kind == "decision" for e, _ in filtered)
