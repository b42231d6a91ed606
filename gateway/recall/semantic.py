"""Recall's semantic stage: a sentence-embedding model run by onnxruntime.

Optional: `pip install -e '.[semantic]'` (onnxruntime, tokenizers, numpy; no
PyTorch) and a model directory named by `RELAYROOM_SEMANTIC_MODEL` holding
`model.onnx` (a BERT-style encoder: inputs input_ids, attention_mask and
optionally token_type_ids; output the token states, or one pooled vector
per text) and `tokenizer.json`.  `RELAYROOM_SEMANTIC_MODEL_SHA256` pins the
sha256 of `model.onnx`; a file that does not match is not run.

Whether the stage is on is decided once, by the hub, from its settings
(`load`): without the setting, the extra or a matching file, the hub logs
one line saying why and recall stays lexical.  Nothing is ever downloaded.

Everything that runs the model runs on a worker thread (`embed`), never on
the event loop: one query per recall, and each trusted entry once, by the
fill job (`fill_once`), outside any transaction.  The vector rows follow
trust inside the store's transactions (gateway/store/queries/vectors.py);
the fill replaces the placeholder a promotion leaves.  An entry whose
vector is not there yet is still found by the lexical stage.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
import os
import threading
import time
from collections import OrderedDict, Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from gateway.recall.search import words

log = logging.getLogger("relayroom.recall")

REQUIRED = ("onnxruntime", "tokenizers", "numpy")
MAX_TOKENS = 256  # what all-MiniLM-L6-v2 was trained to read; longer texts are cut
FILL_BATCH = 32
FILL_INTERVAL = 0.5  # seconds between looks for new placeholders (an indexed range)
QUERY_CACHE = 512
# Matrices kept per process, least recently asked project dropped first:
# 200k rows of 384 float32 are about 300 MB.
MAX_CACHED_ROWS = 200_000
RECHECK = 10.0  # seconds between full checks of a cached matrix (see project_vectors)


class ModelUnavailable(Exception):
    """Why the semantic stage cannot run (one line, for the log and /readyz)."""


def entry_text(kind: str, statement: str, evidence: str | None) -> str:
    """What is embedded for an entry."""
    return f"{kind}: {statement}" + (f" ({evidence})" if evidence else "")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Encoder:
    """A tokenizer and an ONNX session: text in, unit-length float32 rows out.

    Mean pooling over the attention mask, then L2 normalisation (what
    sentence-transformers does for MiniLM); a model whose output already is
    one vector per text is only normalised.  One intra-op thread: a query is
    short, and the gateway shares its cores with the store."""

    def __init__(self, folder: Path, sha256: str | None = None, threads: int = 1) -> None:
        missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
        if missing:
            raise ModelUnavailable(f"the semantic extra is not installed (missing {', '.join(missing)}: pip install '.[semantic]')")
        model_file, tokenizer_file = folder / "model.onnx", folder / "tokenizer.json"
        for needed in (model_file, tokenizer_file):
            if not needed.is_file():
                raise ModelUnavailable(f"{needed} does not exist")
        digest = file_sha256(model_file)
        if sha256 is not None and digest != sha256.strip().lower():
            raise ModelUnavailable(f"{model_file} has sha256 {digest}, not the expected {sha256.strip().lower()}")
        self.sha256 = digest
        self.model_id = f"onnx:{digest[:16]}"

        import numpy
        import onnxruntime
        from tokenizers import Tokenizer

        self._numpy = numpy
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as error:  # a corrupt or foreign file: say so, serve lexical recall
            raise ModelUnavailable(f"{folder} could not be loaded: {error}") from None
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.dimension = int(self.encode(["dimension probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> Any:
        np = self._numpy
        batch = self.tokenizer.encode_batch(list(texts))
        ids = np.array([b.ids for b in batch], dtype=np.int64)
        mask = np.array([b.attention_mask for b in batch], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        out = self.session.run(None, feed)[0]
        if out.ndim == 3:
            weights = mask[:, :, None].astype(np.float32)
            out = (out * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.clip(norms, 1e-12, None)).astype(np.float32)


@dataclass
class ProjectVectors:
    """One project's trusted vectors as a matrix, with what fusion reads of
    each entry (its kind and its words, for the document frequencies)."""

    stamp: tuple[int, int, int]
    seqs: Any  # numpy int64 array
    kinds: list[str]
    matrix: Any  # (n, dimension) float32, unit rows
    df: Counter[str] = field(default_factory=Counter)
    row: dict[int, int] = field(default_factory=dict)  # seq -> row of the matrix
    checked: float = field(default_factory=time.monotonic)  # when the full stamp last matched

    def __post_init__(self) -> None:
        self.row = {int(seq): i for i, seq in enumerate(self.seqs)}

    @property
    def size(self) -> int:
        return len(self.kinds)


Nearest = tuple[dict[int, float], list[float], Any]


def nearest(vectors: ProjectVectors, query_vector: Any, kind: str | None, k: int) -> Nearest:
    """The k nearest rows' cosines (by seq), the top cosines best first, and every row's cosine."""
    import numpy

    similarity = vectors.matrix @ query_vector
    if kind is not None:
        similarity = numpy.where(numpy.array([c == kind for c in vectors.kinds]), similarity, -1.0)
    k = min(k, len(similarity))
    top = numpy.argpartition(-similarity, k - 1)[:k]
    top = top[numpy.argsort(-similarity[top])]
    cosine = {int(vectors.seqs[i]): float(similarity[i]) for i in top if similarity[i] > -1.0}
    return cosine, [float(similarity[i]) for i in top[:2]], similarity


@dataclass(frozen=True)
class QueryVector:
    """A query's vector and, when the project's matrix was cached, its
    nearest rows in that matrix (`on`: the matrix they were computed on)."""

    vector: Any
    on: ProjectVectors | None = None
    nearest: Nearest | None = None


class SemanticStage:
    """The loaded model, the per-process caches and the fill job."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.model_id = encoder.model_id
        self._projects: OrderedDict[int, ProjectVectors] = OrderedDict()
        self._queries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    # -- queries -------------------------------------------------------------------

    def _query_vector(self, text: str) -> Any:
        with self._lock:
            hit = self._queries.get(text)
            if hit is not None:
                self._queries.move_to_end(text)
                return hit
        vector = self.encoder.encode([text])[0]
        with self._lock:
            self._queries[text] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    async def embed_query(self, text: str) -> Any:
        """The query's vector, computed on a worker thread (agents repeat
        themselves: a small cache answers a repeated question at once)."""
        return await asyncio.to_thread(self._query_vector, text)

    async def embed_and_rank(self, text: str, project_id: int, kind: str | None, k: int) -> QueryVector:
        """The query's vector and its k nearest rows in the project's cached
        matrix, in one trip to a worker thread.

        The cosines follow the embedding on the same thread, while the event
        loop reads the lexical candidates: no second hand-off to the pool
        and back.  They are computed on the matrix cached now; `fused` uses
        them only if the recall's own check of the vector rows keeps that
        very matrix, and ranks again otherwise."""
        return await asyncio.to_thread(self._embed_and_rank, text, project_id, kind, k)

    def _embed_and_rank(self, text: str, project_id: int, kind: str | None, k: int) -> QueryVector:
        vector = self._query_vector(text)
        cached = self._projects.get(project_id)  # one dict lookup: safe beside the loop's own use
        if cached is None:
            return QueryVector(vector)
        return QueryVector(vector, cached, nearest(cached, vector, kind, k))

    async def project_vectors(self, q: Any, project_id: int) -> ProjectVectors | None:
        """The project's matrix, read again only when its vector rows changed.

        Every recall checks the highest vector id (one index seek): a new
        vector always raises it.  A deletion (an entry leaving trust) does
        not, so the full stamp, which scans the project's rows, is checked
        at most every `RECHECK` seconds; meanwhile a left entry's row may
        still be in the matrix, and is dropped by the trusted-and-unexpired
        check every result passes anyway."""
        cached = self._projects.get(project_id)
        if cached is not None:
            if await q.vector_top(project_id, self.model_id) == cached.stamp[1] and time.monotonic() < cached.checked + RECHECK:
                self._projects.move_to_end(project_id)
                return cached
        stamp = await q.vector_stamp(project_id, self.model_id)
        if stamp[0] == 0:
            self._projects.pop(project_id, None)
            return None
        if cached is not None and cached.stamp == stamp:
            cached.checked = time.monotonic()
            self._projects.move_to_end(project_id)
            return cached
        rows = await q.project_vectors(project_id, self.model_id)
        if not rows:
            return None
        # Tens of milliseconds at 10k entries: not on the event loop.
        loaded = await asyncio.to_thread(self._matrix, stamp, rows)
        self._projects[project_id] = loaded
        self._projects.move_to_end(project_id)
        while len(self._projects) > 1 and sum(p.size for p in self._projects.values()) > MAX_CACHED_ROWS:
            self._projects.popitem(last=False)  # the least recently asked project
        return loaded

    def _matrix(self, stamp: tuple[int, int, int], rows: list[dict[str, Any]]) -> ProjectVectors:
        np = self.encoder._numpy
        matrix = np.frombuffer(b"".join(bytes(r["vector"]) for r in rows), dtype=np.float32).reshape(len(rows), -1)
        df: Counter[str] = Counter()
        for r in rows:
            df.update(set(words(f"{r['statement']} {r['evidence'] or ''}")))
        seqs = np.array([int(r["seq"]) for r in rows], dtype=np.int64)
        return ProjectVectors(stamp, seqs, [str(r["kind"]) for r in rows], matrix, df)

    def forget(self) -> None:
        """Drop the cached matrices and query vectors (tests, benchmarks)."""
        self._projects.clear()
        with self._lock:
            self._queries.clear()

    # -- filling the vectors ---------------------------------------------------------

    async def fill_once(self, driver: Any) -> int:
        """Embed up to FILL_BATCH placeholders and write them; how many."""
        rows = await driver.read(lambda q: q.pending_vectors(self.model_id, FILL_BATCH))
        if not rows:
            return 0
        texts = [entry_text(r["kind"], r["statement"], r["evidence"]) for r in rows]
        matrix = await asyncio.to_thread(self.encoder.encode, texts)
        filled = [(int(r["id"]), int(r["seq"]), int(r["project_id"]), matrix[i].tobytes()) for i, r in enumerate(rows)]
        await driver.write(lambda q: q.fill_vectors(self.model_id, filled))
        return len(rows)

    async def fill_all(self, driver: Any) -> int:
        total = 0
        while True:
            done = await self.fill_once(driver)
            if not done:
                return total
            total += done

    async def fill_loop(self, driver: Any) -> None:
        while True:
            try:
                await self.fill_all(driver)
            except Exception:  # retried next round; meanwhile the lexical stage finds those entries
                log.exception("filling recall vectors failed")
            await asyncio.sleep(FILL_INTERVAL)


@dataclass(frozen=True)
class SemanticStatus:
    """Which ranking recall uses, and why (for /readyz, the dashboard, the log)."""

    ranking: str  # "fused" or "lexical"
    detail: str
    model: str | None = None


def load(model_dir: str | None, sha256: str | None) -> tuple[SemanticStage | None, SemanticStatus]:
    """The semantic stage the settings ask for, or None and the reason."""
    if not model_dir:
        return None, SemanticStatus("lexical", "no semantic model configured (RELAYROOM_SEMANTIC_MODEL)")
    # The session's own thread pool is set per session; this keeps a BLAS
    # that numpy or ORT links from starting one thread per core.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        encoder = Encoder(Path(model_dir), sha256)
    except ModelUnavailable as why:
        return None, SemanticStatus("lexical", f"semantic model not used: {why}")
    detail = f"fused lexical + semantic ({model_dir}, sha256 {encoder.sha256[:12]}...)"
    if sha256 is None:
        detail += "; sha256 not pinned: set RELAYROOM_SEMANTIC_MODEL_SHA256=" + encoder.sha256
    return SemanticStage(encoder), SemanticStatus("fused", detail, encoder.model_id)
