"""Recall latency with and without the semantic stage, at N trusted entries.

    .venv/bin/python bench/recall_semantic_latency.py --model DIR [--entries 10000] [--queries 300]

Builds a SQLite store with N trusted entries in one project (bench/memory.py's
loader: synthetic statements, Zipf-like vocabulary), leaves a vector
placeholder per entry as a promotion would, and lets the fill job embed them
(timed: entries per second).  Then:

- stages, in process, one query at a time: the query's embedding (a new
  question each time: the query cache never answers), the lexical search
  (the candidates fusion reads), the project's cosines (matrix product and
  top-k), and the whole `Recall.recall` (with the recall record);
- client side: `relayroom serve` (one worker, the shipped defaults: log level
  info, the access log, the sweep, the read budget) with the model and
  without it, one keep-alive client sending `GET /v1/projects/bench/recall?q=...`
  one after another; p50 and p99 of the wall time the client sees, and of
  the server's own time for each recall (its access log).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.attest import free_port, wait_ready  # noqa: E402
from bench.outside import let_copies_load  # noqa: E402
from bench.memory import VOCABULARY, WEIGHTS, create_store, load_entries  # noqa: E402
from bench.recall_latency import percentile  # noqa: E402
from gateway.core.clock import SystemClock  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.recall import stages  # noqa: E402
from gateway.recall.semantic import nearest  # noqa: E402


def questions(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    frames = ("how do I {} the {}", "why does {} fail with {}", "where is {} {} configured", "{} {} {}")
    out = []
    for _ in range(count):
        picked = rng.choices(VOCABULARY, cum_weights=WEIGHTS, k=3)
        frame = rng.choice(frames)
        out.append(frame.format(*picked[: frame.count("{}")]))
    return out


def ms(samples: list[float]) -> str:
    return f"p50 {statistics.median(samples):.2f} ms, p99 {percentile(samples, 99):.2f} ms"


async def prepare(db_url: str, model: str, sha256: str | None) -> float:
    """Placeholders for every trusted entry, then the fill job; entries/s."""
    hub = Hub(Config.from_env({}, database_url=db_url, sweep_interval=0.0, semantic_model=model,
                              semantic_model_sha256=sha256), clock=SystemClock())
    await hub.start(background=False)
    try:
        await hub.driver.write(lambda q: q.tx.run(
            "INSERT INTO entry_vectors (seq, project_id) SELECT seq, project_id FROM entries "
            "WHERE state = 'trusted' ORDER BY seq ON CONFLICT (seq) DO NOTHING"))
        assert hub.recall.semantic is not None, hub.recall.status.detail
        started = time.perf_counter()
        done = await hub.recall.semantic.fill_all(hub.driver)
        return done / (time.perf_counter() - started)
    finally:
        await hub.stop()


async def stage_times(db_url: str, model: str, sha256: str | None, asked: list[str]) -> dict[str, list[float]]:
    hub = Hub(Config.from_env({}, database_url=db_url, sweep_interval=0.0, recalls_per_hour=1_000_000,
                              semantic_model=model, semantic_model_sha256=sha256), clock=SystemClock())
    await hub.start(background=False)
    out: dict[str, list[float]] = {"embed": [], "lexical": [], "cosine": [], "recall (fused)": []}
    try:
        stage = hub.recall.semantic
        assert stage is not None
        principal = await hub.accounts.authenticate(await hub.accounts.create_token("bench", "read", "stage-timer"))
        project_id = principal.project.id
        for question in asked[:20]:
            await hub.recall.recall(principal, question)
        for question in asked[20:]:
            # Every question is new, so the query cache never answers; the
            # project's matrix is cached as in a serving process.
            vectors = await hub.driver.read(lambda q: stage.project_vectors(q, project_id))
            t = time.perf_counter()
            vector = await stage.embed_query(question)
            out["embed"].append((time.perf_counter() - t) * 1000)
            now = hub.clock.now()
            t = time.perf_counter()
            await hub.driver.read(lambda q: q.search(project_id, question, None, stages.CANDIDATES, now))
            out["lexical"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            nearest(vectors, vector, None, stages.CANDIDATES)
            out["cosine"].append((time.perf_counter() - t) * 1000)
            with_cache = question + " again"
            t = time.perf_counter()
            await hub.recall.recall(principal, with_cache)
            out["recall (fused)"].append((time.perf_counter() - t) * 1000)
    finally:
        await hub.stop()
    return out


def client_side(db_url: str, work: Path, token: str, asked: list[str], env_extra: dict[str, str],
                label: str) -> tuple[list[float], list[float]]:
    """The client's wall time of each recall, and the server's own time for
    it (its access log's `ms`), past the first 20.  The server runs at the
    shipped defaults, as a user runs it: log level info with the access log
    (written to a file, as a service manager would keep it), the sweep, the
    read budget (3,600 recalls an hour per token: more than a run sends)."""
    import httpx

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env.update(RELAYROOM_DATABASE_URL=db_url, RELAYROOM_PORT=str(port), RELAYROOM_CHECKMAPS=str(work / "checkmaps"),
               **env_extra)
    log_path = work / f"server-{label}.log"
    samples = []
    with open(log_path, "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], env=env, cwd=work,
                                  stderr=log)
        try:
            wait_ready(port, server)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}) as client:
                ranking = client.get("/readyz").json()["recall"]["ranking"]
                print(f"  server ranking: {ranking}", file=sys.stderr)
                for i, question in enumerate(asked):
                    if i == 20:
                        let_copies_load(server.pid, lambda: client.get(f"/v1/projects/bench/recall?q={quote(asked[0])}"))
                    t = time.perf_counter()
                    r = client.get(f"/v1/projects/bench/recall?q={quote(question)}")
                    elapsed = (time.perf_counter() - t) * 1000
                    assert r.status_code == 200, r.text
                    if i >= 20:
                        samples.append(elapsed)
        finally:
            server.terminate()
            server.wait(30)
    return samples, recall_times(log_path)[-len(samples):]  # the warm-up's and the copy's loading left out


def recall_times(log_path: Path) -> list[float]:
    """The `ms` of each recall line of a server's JSON log, in order.  Lines
    that are not the gateway's JSON (a native library writing to stderr) are
    skipped."""
    own = []
    for text in log_path.read_text(errors="replace").splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("logger") == "relayroom.access" \
                and str(line.get("route", "")).endswith("/recall"):
            own.append(float(line["ms"]))
    return own


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("RELAYROOM_SEMANTIC_MODEL"))
    parser.add_argument("--sha256", default=os.environ.get("RELAYROOM_SEMANTIC_MODEL_SHA256"))
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args(argv)
    if not args.model:
        parser.error("name the model folder: --model DIR or RELAYROOM_SEMANTIC_MODEL=DIR")
    # The server runs in a folder of its own: a relative path would name nothing there.
    args.model = os.path.abspath(args.model)
    work = Path(tempfile.mkdtemp(prefix="relayroom-semantic-bench-"))
    (work / "checkmaps").mkdir()
    db_url = f"sqlite:///{work / 'bench.sqlite'}"
    tokens = asyncio.run(create_store(db_url))
    asyncio.run(load_entries(db_url, args.entries))
    rate = asyncio.run(prepare(db_url, args.model, args.sha256))
    print(f"{args.entries} trusted entries; the fill job embedded {rate:.0f} entries/s (one thread)")
    stages_ms = asyncio.run(stage_times(db_url, args.model, args.sha256, questions(args.queries + 20, seed=3)))
    print("\nstages, in process:")
    for name, samples in stages_ms.items():
        print(f"  {name:16s} {ms(samples)}")
    model_env = {"RELAYROOM_SEMANTIC_MODEL": args.model}
    if args.sha256:
        model_env["RELAYROOM_SEMANTIC_MODEL_SHA256"] = args.sha256
    fused, fused_own = client_side(db_url, work, tokens["read"], questions(args.queries + 20, seed=5), model_env,
                                   "fused")
    lexical, lexical_own = client_side(db_url, work, tokens["read"], questions(args.queries + 20, seed=7), {},
                                       "lexical")
    print("\nclient side, GET /v1/projects/bench/recall, one client (the server at its defaults):")
    print(f"  fused (semantic on)  {ms(fused)}; the server's own time {ms(fused_own)}")
    print(f"  lexical (no model)   {ms(lexical)}; the server's own time {ms(lexical_own)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
