"""Recall's semantic stage: a sentence-embedding model run by onnxruntime.

Which model is decided once, by the hub (`load`, from
`RELAYROOM_SEMANTIC_MODEL`: by default the model the package installs with;
with `RELAYROOM_SEMANTIC_PAIR` on, that model and its companion read
together, `gateway.recall.ensemble`); when it cannot run, the hub logs one
line saying why and recall stays lexical (when only the companion cannot,
the first model ranks alone).  Nothing is ever downloaded.

Everything that runs the model runs on a worker thread, never on the event
loop: one query per recall, and each trusted entry once, by the fill job
(`fill_once`), outside any transaction, one entry per model run.  The
vector rows follow trust inside the store's transactions
(gateway/store/queries/vectors.py); the fill replaces the placeholder a
promotion leaves.  An entry whose vector is not there yet is still found by
the lexical stage.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import OrderedDict, Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

from gateway.core.allocator import give_back
from gateway.recall import ensemble
from gateway.recall.model import ModelFiles, ModelUnavailable, companion, resolve
from gateway.recall.query import words
from gateway.store.base import Driver
from gateway.store.queries import Queries

log = logging.getLogger("relayroom.recall")

MAX_TOKENS = 256  # what all-MiniLM-L6-v2 was trained to read; longer texts are cut
FILL_BATCH = 256  # placeholders read per round of the fill job
FILL_INTERVAL = 0.5  # seconds between looks for new placeholders (an indexed range)
QUERY_CACHE = 512
# Matrices kept per process, least recently asked project dropped first:
# 200k rows of 384 float32 are about 300 MB (with two models, 100k entries).
MAX_CACHED_ROWS = 200_000
# A project past this many vectors of one model (50k entries with one model,
# 25k with two) is held by their signs only (48 bytes a model and entry
# instead of 1.5 KB): its nearest are picked by those, then ranked by the
# cosines of the candidates' own vectors, read from the store.
DENSE_ROWS = 50_000
SHORTLIST = 8  # candidates read per nearest entry wanted, for a project held by signs
PAGE = 5000  # vector rows read at once when a matrix is loaded


def entry_text(kind: str, statement: str, evidence: str | None) -> str:
    """What is embedded for an entry."""
    return f"{kind}: {statement}" + (f" ({evidence})" if evidence else "")


class Encoder:
    """A tokenizer and an ONNX session: text in, unit-length float32 rows out.

    Mean pooling over the attention mask, then L2 normalisation (what
    sentence-transformers does for MiniLM); a model whose output already is
    one vector per text is only normalised.  One intra-op thread: a query is
    short, and the gateway shares its cores with the store."""

    def __init__(self, files: ModelFiles, threads: int = 1) -> None:
        import numpy
        import onnxruntime
        from tokenizers import Tokenizer

        self.model_id = f"onnx:{files.sha256[:16]}"
        self.query_prefix, self.passage_prefix = files.query_prefix, files.passage_prefix
        self._numpy = numpy
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(str(files.model), options, providers=["CPUExecutionProvider"])
            self.tokenizer = Tokenizer.from_file(str(files.tokenizer))
        except Exception as error:  # a corrupt or foreign file: say so, serve lexical recall
            raise ModelUnavailable(f"{files.model} could not be loaded: {error}") from None
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.dimension = int(self.encode(["dimension probe"]).shape[1])

    def encode_many(self, texts: Sequence[str]) -> Any:
        """`encode`, one text per model run, rows in the order of `texts`.

        The int8 model quantises its activations with one scale per run, taken
        over every text of the run and its padding: in a run of several, a
        text's vector would depend on the texts beside it (and so on when the
        fill job happened to look), and differ from the same text asked as a
        question.  One at a time is as fast on CPU."""
        np = self._numpy
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self.encode([text])[0]
        return out

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


# The process's threads for the second model's questions (started at its first).
_SECOND_MODEL = ThreadPoolExecutor(2, thread_name_prefix="relayroom-second-model")


class Models:
    """The models recall runs, one or two, as one encoder: each text is
    embedded by each model (with the model's prefix for a question or an
    entry) and the unit vectors are put side by side.  One model's vectors
    and model id are exactly that model's."""

    def __init__(self, encoders: Sequence[Encoder]) -> None:
        self.encoders = list(encoders)
        self.widths = tuple(e.dimension for e in self.encoders)
        self.dimension = sum(self.widths)
        self.model_id = "+".join(e.model_id for e in self.encoders)

    def query(self, text: str) -> Any:
        import numpy

        first, *others = self.encoders
        if not others:
            return first.encode([first.query_prefix + text])[0]
        # The pair's question: the second model on another thread while the
        # first runs here (onnxruntime lets go of the GIL), for the recall p50
        # the pair is measured by (docs/recall.md); entries, in the background
        # fill, stay one model after the other on one core.
        later = [_SECOND_MODEL.submit(e.encode, [e.query_prefix + text]) for e in others]
        return numpy.concatenate([first.encode([first.query_prefix + text])[0], *(f.result()[0] for f in later)])

    def passages(self, texts: Sequence[str]) -> Any:
        import numpy

        return numpy.hstack([e.encode_many([e.passage_prefix + t for t in texts]) for e in self.encoders])


@dataclass
class ProjectVectors:
    """One project's trusted vectors as a matrix, with what fusion reads of
    each entry (its kind and its words, for the document frequencies)."""

    generation: int  # the project's recall generation it was read at
    seqs: Any  # numpy int64 array
    kinds: list[str]
    matrix: Any  # (n, dimension) float32, unit rows; None for a project held by signs
    df: Counter[str] = field(default_factory=Counter)
    row: dict[int, int] = field(default_factory=dict)  # seq -> row of the matrix
    signs: Any = None  # (n, dimension / 64) uint64: each vector's signs, for a big project
    widths: tuple[int, ...] = (384,)  # each model's part of a row (gateway.recall.ensemble)

    def trim(self, size: int) -> None:
        """Keep the first `size` rows (the ones read), and index them by seq."""
        self.seqs = self.seqs[:size]
        if self.matrix is not None:
            self.matrix = self.matrix[:size]
        if self.signs is not None:
            self.signs = self.signs[:size]
        else:  # held by signs, a project's vectors are read back by seq: no index needed
            self.row = {int(seq): i for i, seq in enumerate(self.seqs)}

    @property
    def size(self) -> int:
        return len(self.kinds)


# The k nearest rows' similarities (by seq), the first model's top two cosines,
# the last model's best cosine (the confidence's), every row's similarity.
Nearest = tuple[dict[int, float], list[float], float, Any]


def shortlist(vectors: ProjectVectors, query_vector: Any, kind: str | None, k: int) -> list[int]:
    """For a project held by signs: the seqs of the `k` rows whose signs
    agree most with the question's (of `kind`)."""
    import numpy

    query = numpy.packbits(query_vector > 0).view(numpy.uint64)
    agree = numpy.empty(len(vectors.signs), numpy.int64)
    for start in range(0, len(agree), 8192):  # in slices: small temporaries, whatever the project's size
        agree[start:start + 8192] = -numpy.bitwise_count(vectors.signs[start:start + 8192] ^ query).sum(axis=1)
    if kind is not None:
        agree = numpy.where(numpy.array([c == kind for c in vectors.kinds]), agree, -(1 << 20))
    k = min(k, len(agree))
    return [int(vectors.seqs[i]) for i in numpy.argpartition(-agree, k - 1)[:k] if agree[i] > -(1 << 20)]


def cosines(
    query_vector: Any, rows: list[dict[str, Any]], among: set[int], k: int, also: set[int], widths: Sequence[int]
) -> tuple[dict[int, float], list[float], float]:
    """The similarities (by seq) of the `k` nearest rows of `among` and of
    the rows of `also`, the best two of `among`'s first-model cosines and
    the best of its last-model ones; with two models, scaled over the rows
    read (`ensemble.combined`)."""
    import numpy

    if not rows:
        return {}, [], 0.0
    seqs = [int(r["seq"]) for r in rows]
    matrix = numpy.stack([numpy.frombuffer(r["vector"], dtype=numpy.float32) for r in rows])
    similarity, first, last = ensemble.combined(ensemble.per_model(matrix, query_vector, widths))
    found = {seq: float(similarity[i]) for i, seq in enumerate(seqs)}
    seen = [i for i, seq in enumerate(seqs) if seq in among]
    best = sorted((seqs[i] for i in seen), key=lambda seq: -found[seq])
    keep = set(best[:k]) | also
    top = sorted((float(first[i]) for i in seen), reverse=True)[:2]
    sure = max((float(last[i]) for i in seen), default=0.0)
    return {seq: c for seq, c in found.items() if seq in keep}, top, sure


def nearest(vectors: ProjectVectors, query_vector: Any, kind: str | None, k: int, per_model: Any = None) -> Nearest:
    """`Nearest` of the rows of `kind`; `per_model`: each model's cosines
    of every row (`ensemble.per_model`), when already computed."""
    import numpy

    if per_model is None:
        per_model = ensemble.per_model(vectors.matrix, query_vector, vectors.widths)
    allowed = None if kind is None else numpy.array([c == kind for c in vectors.kinds], dtype=bool)
    similarity, first, last = ensemble.combined(per_model, allowed)
    if allowed is not None:
        masked = numpy.where(allowed, similarity, -1.0)
        # One model: its cosines are the similarity, masked once and ranked once.
        first = masked if first is similarity else numpy.where(allowed, first, -1.0)
        last = first if len(per_model) == 1 else numpy.where(allowed, last, -1.0)
        similarity = masked
    k = min(k, len(similarity))
    top = numpy.argpartition(-similarity, k - 1)[:k]
    top = top[numpy.argsort(-similarity[top])]
    cosine = {int(vectors.seqs[i]): float(similarity[i]) for i in top if similarity[i] > -1.0}
    if first is not similarity:
        n = min(2, len(first))
        top = numpy.argpartition(-first, n - 1)[:n]
        top = top[numpy.argsort(-first[top])]
    best_two = [float(first[i]) for i in top[:2]]
    sure = best_two[0] if last is first or not best_two else float(last.max())
    return cosine, best_two, sure, similarity


@dataclass(frozen=True)
class QueryVector:
    """A query's vector and, when the project's matrix was cached, its
    nearest rows in that matrix (`on`: the matrix they were computed on)."""

    vector: Any
    on: ProjectVectors | None = None
    nearest: Nearest | None = None


class SemanticStage:
    """The loaded model, the per-process caches and the fill job."""

    def __init__(self, encoder: Models, driver: Driver) -> None:
        self.encoder = encoder
        self.model_id = encoder.model_id
        self._projects: OrderedDict[int, ProjectVectors] = OrderedDict()
        self._queries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._reloading: dict[int, asyncio.Future[None]] = {}
        self.driver = driver  # the background reloads of a matrix read through it

    # -- queries -------------------------------------------------------------------

    def _query_vector(self, text: str) -> Any:
        with self._lock:
            hit = self._queries.get(text)
            if hit is not None:
                self._queries.move_to_end(text)
                return hit
        vector = self.encoder.query(text)
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
        if cached is None or cached.matrix is None:
            return QueryVector(vector)
        return QueryVector(vector, cached, nearest(cached, vector, kind, k))

    async def project_vectors(self, q: Queries, project_id: int) -> ProjectVectors | None:
        """The project's matrix as of its recall generation (every change to
        what recall shows, a vector written included, moves it in its own
        transaction).  A project read for the first time is read here; one
        whose generation moved since is read again in the background while
        recalls use the matrix they have: it may lack the newest vectors
        (those entries are found by the lexical stage meanwhile) or hold an
        entry that left trust (every result is checked against its entry)."""
        generation = await q.recall_generation(project_id)
        cached = self._projects.get(project_id)
        if cached is not None:
            self._projects.move_to_end(project_id)
            if cached.generation != generation and project_id not in self._reloading:
                self._reloading[project_id] = asyncio.ensure_future(self._reload(self.driver, project_id))
            return cached
        loaded = await self._load(q, project_id, generation)
        if loaded is not None:
            self._keep(project_id, loaded)
        return loaded

    async def _reload(self, driver: Driver, project_id: int) -> None:
        try:
            generation = await driver.read(lambda q: q.recall_generation(project_id))
            loaded = await self._load(driver, project_id, generation)
            if loaded is None:
                self._projects.pop(project_id, None)
            else:
                self._keep(project_id, loaded)
        except Exception:  # the next recall tries again; meanwhile the old matrix serves
            log.exception("reading the recall vectors of project %s failed", project_id)
        finally:
            self._reloading.pop(project_id, None)

    async def _load(self, q: Queries | Driver, project_id: int, generation: int) -> ProjectVectors | None:
        """The project's vectors, page by page into one matrix (its rows held
        at once would double a big project's memory while it loads); given
        the driver, each page in a read of its own, so the store's reads go
        on between them."""

        async def read(unit: Any) -> Any:
            return await q.read(unit) if isinstance(q, Driver) else await unit(q)

        count = await read(lambda x: x.count_vectors(project_id, self.model_id))
        if not count:
            return None
        import numpy as np

        widths = self.encoder.widths
        dense = count * len(widths) <= DENSE_ROWS
        loaded = ProjectVectors(generation, np.empty(count, np.int64), [],
                                np.empty((count, self.encoder.dimension), np.float32) if dense else None, widths=widths)
        if not dense:
            loaded.signs = np.empty((count, self.encoder.dimension // 64), np.uint64)
        after, at = 0, 0
        while at < count:
            rows = await read(lambda x, after=after, at=at: x.project_vectors(project_id, self.model_id, after, min(PAGE, count - at)))
            if not rows:
                break
            await asyncio.to_thread(self._fill_matrix, loaded, at, rows)  # milliseconds a page: off the loop
            at, after = at + len(rows), int(rows[-1]["id"])
        loaded.trim(at)
        give_back()  # the pages of rows just read, freed at once
        return loaded

    def _keep(self, project_id: int, loaded: ProjectVectors) -> None:
        self._projects[project_id] = loaded
        self._projects.move_to_end(project_id)
        while len(self._projects) > 1 and sum(p.size * len(p.widths) for p in self._projects.values()) > MAX_CACHED_ROWS:
            self._projects.popitem(last=False)  # the least recently asked project

    def _fill_matrix(self, loaded: ProjectVectors, at: int, rows: list[dict[str, Any]]) -> None:
        import numpy as np

        for i, r in enumerate(rows, at):
            vector = np.frombuffer(r["vector"], dtype=np.float32)
            if loaded.matrix is not None:
                loaded.matrix[i] = vector
            else:
                loaded.signs[i] = np.packbits(vector > 0).view(np.uint64)
            loaded.seqs[i] = int(r["seq"])
            loaded.kinds.append(str(r["kind"]))
            loaded.df.update(set(words(f"{r['statement']} {r['evidence'] or ''}")))

    async def settled(self) -> None:
        """Wait for the matrices being read again (tests, benchmarks)."""
        while self._reloading:
            await asyncio.gather(*self._reloading.values(), return_exceptions=True)

    def stop(self) -> None:
        for reload in self._reloading.values():
            reload.cancel()

    def forget(self) -> None:
        """Drop the cached matrices and query vectors (tests, benchmarks)."""
        self._projects.clear()
        with self._lock:
            self._queries.clear()

    # -- filling the vectors ---------------------------------------------------------

    async def fill_once(self, driver: Driver) -> int:
        """Embed up to FILL_BATCH placeholders and write them; how many."""
        rows = await driver.read(lambda q: q.pending_vectors(self.model_id, FILL_BATCH))
        if not rows:
            return 0
        texts = [entry_text(r["kind"], r["statement"], r["evidence"]) for r in rows]
        matrix = await asyncio.to_thread(self.encoder.passages, texts)
        filled = [(int(r["id"]), int(r["seq"]), int(r["project_id"]), matrix[i].tobytes()) for i, r in enumerate(rows)]
        await driver.write(lambda q: q.fill_vectors(self.model_id, filled))
        return len(rows)

    async def fill_all(self, driver: Driver) -> int:
        total = 0
        while True:
            done = await self.fill_once(driver)
            if not done:
                return total
            total += done

    async def fill_loop(self, driver: Driver) -> None:
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


_ENCODERS: dict[tuple[str, str, str, str], Encoder] = {}
_ENCODERS_LOCK = threading.Lock()


def _encoder(files: ModelFiles) -> Encoder:
    """The model of `files`, loaded once per process (every hub of it shares the session)."""
    with _ENCODERS_LOCK:
        key = (str(files.model), files.sha256, files.query_prefix, files.passage_prefix)
        return _ENCODERS.get(key) or _ENCODERS.setdefault(key, Encoder(files))


def load(
    setting: str | None, sha256: str | None, driver: Driver, pair: bool = False
) -> tuple[SemanticStage | None, SemanticStatus]:
    """The semantic stage the settings ask for, or None and the reason.

    The installed model runs alone unless `pair` asks for its companion
    (`model.companion`) beside it; when the companion cannot run, the
    first ranks alone and the detail says why.  A named folder runs alone."""
    # The session's own thread pool is set per session; this keeps a BLAS
    # that numpy or ORT links from starting one thread per core.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        files = resolve(setting, sha256)
        if files is None:
            return None, SemanticStatus("lexical", "lexical recall alone (RELAYROOM_SEMANTIC_MODEL=off)")
        encoders = [_encoder(files)]
    except ModelUnavailable as why:
        return None, SemanticStatus("lexical", f"semantic model not used: {why}")
    named = [f"{files.label}, sha256 {files.sha256[:12]}..."]
    alone = ""
    try:
        second = companion(setting) if pair else None
        if second is not None:
            encoders.append(_encoder(second))
            named.append(f"{second.label}, sha256 {second.sha256[:12]}...")
    except ModelUnavailable as why:
        alone = f"; second model not used: {why}"
        log.warning("recall: the second model is not used (%s); the first ranks alone", why)
    models = Models(encoders)
    detail = f"fused lexical + semantic ({' + '.join(named)}){alone}"
    return SemanticStage(models, driver), SemanticStatus("fused", detail, models.model_id)
