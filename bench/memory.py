"""Resident memory of `relayroom serve`: idle, with 100k entries, under load.

    .venv/bin/python bench/memory.py                       # 100k trusted entries, 32 clients, 4000 requests
    .venv/bin/python bench/memory.py --entries 20000 --requests 1000   # quicker

Every figure is the resident set size (VmRSS) of one `relayroom serve`
process (one worker, SQLite, the default deployment), read from
/proc/PID/status, and printed with its ratio to the same server idle on an
empty store measured in the same run.

1. idle: the server started on a store holding one project and answered /readyz;
2. loaded: restarted on the same store after 100k trusted entries (their
   recall index rows, and their vectors: random unit rows of the model the
   server runs, as the fill job would leave them) were written straight
   through the store in batches;
3. after recall: the loaded server after a few recalls (the index pages read);
4. under load: the peak, sampled every 50 ms, while CLIENTS concurrent clients
   on 127.0.0.1 send a bounded mix of recalls (70%), learns (20%) and entry
   listings (10%); VmHWM (the kernel's own peak) is printed beside it.

Target: under 250 MB with the model loaded (the default install fuses).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.core.clock import SystemClock  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.knowledge.trust import normalise_statement  # noqa: E402

TARGET_MB = 250
BATCH = 20_000
KINDS = ("fact", "convention", "pitfall", "decision")
WORDS = (
    "test build run install config database migration deploy release docs lint format error cache server client "
    "api request response token branch commit review plugin module package version log debug timeout retry queue "
    "worker thread async file folder path schema index query user project service container image pipeline job "
    "check coverage snapshot fixture mock proxy port host json yaml pooler prepared statement locale tuesday"
).split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def mb(kib: float) -> float:
    return kib / 1024


class Server:
    """One `relayroom serve` child process, stopped by its own pid."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--port", str(self.port)],
                env=env, cwd=str(ROOT), stdout=out, stderr=subprocess.STDOUT,
            )

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"relayroom serve exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError("relayroom serve did not become ready")

    def rss(self) -> int:
        return status_kib(self.proc.pid, "VmRSS")

    def peak(self) -> int:
        return status_kib(self.proc.pid, "VmHWM")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def settle(server: Server) -> int:
    """RSS once it stops moving (after start, imports and lazy set-up)."""
    last = server.rss()
    for _ in range(20):
        time.sleep(0.1)
        now = server.rss()
        if abs(now - last) < 64:
            return now
        last = now
    return last


# -- the store ------------------------------------------------------------------------


async def create_store(database_url: str) -> dict[str, str]:
    hub = Hub(Config.from_env({}, database_url=database_url, sweep_interval=0.0), clock=SystemClock())
    await hub.start(background=False)
    try:
        await hub.accounts.create_project("bench")
        return {
            "read": await hub.accounts.create_token("bench", "read", "bench-reader"),
            "write": await hub.accounts.create_token("bench", "write", "bench-agent"),
        }
    finally:
        await hub.stop()


def vocabulary(size: int = 8000, seed: int = 5) -> tuple[list[str], list[float]]:
    """Project words plus made-up ones, with Zipf-like weights, so a query
    matches a realistic share of the entries rather than all of them."""
    rng = random.Random(seed)
    words, seen = list(WORDS), set(WORDS)
    while len(words) < size:
        word = "".join(rng.choice("etaoinshrdlucmfwypvbgk") for _ in range(rng.randint(4, 10)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    cumulative, total = [], 0.0
    for rank in range(len(words)):
        total += 1.0 / (rank + 10)
        cumulative.append(total)
    return words, cumulative


VOCABULARY, WEIGHTS = vocabulary()


def statement(rng: random.Random, n: int) -> str:
    words = rng.choices(VOCABULARY, cum_weights=WEIGHTS, k=rng.randint(8, 20))
    return f"{' '.join(words).capitalize()} (note {n})."


async def load_entries(database_url: str, count: int, seed: int = 7) -> float:
    """`count` trusted entries and their recall index rows, in big batches:
    the rows an owner's confirm would leave, without 100k requests."""
    # The server's model settings (the pair included), so that the vectors carry its model id.
    model_env = {k: v for k, v in os.environ.items() if k.startswith("RELAYROOM_SEMANTIC_")}
    hub = Hub(Config.from_env(model_env, database_url=database_url, sweep_interval=0.0), clock=SystemClock())
    await hub.start(background=False)
    rng = random.Random(seed)
    import numpy

    vectors = numpy.random.default_rng(seed)
    model = hub.recall.semantic.model_id if hub.recall.semantic is not None else None
    started = time.perf_counter()
    try:
        if hub.driver.dialect != "sqlite":
            raise SystemExit("bench/memory.py loads entries with SQLite's index tables; use a sqlite:/// URL")
        project = await hub.accounts.project("bench")
        now = hub.clock.now()
        done = 0
        while done < count:
            n = min(BATCH, count - done)
            rows = [(statement(rng, done + i), rng.choice(KINDS)) for i in range(n)]

            async def unit(q: Any, rows: list[tuple[str, str]] = rows) -> None:
                top = await q.tx.one("SELECT COALESCE(MAX(seq), 0) AS s FROM entries")
                first = int(top["s"]) + 1
                await q.tx.run_many(
                    "INSERT INTO entries (seq, id, project_id, kind, statement, evidence, norm_statement, state, "
                    "created_at, created_by, created_via, expires_at, promoted_at, promoted_by, provenance) "
                    "VALUES (?, ?, ?, ?, ?, NULL, ?, 'trusted', ?, 'bench-loader', 'learn', NULL, ?, 'owner:bench', NULL)",
                    [(first + i, f"kn_mem_{first + i}", project.id, kind, text, normalise_statement(text), now, now)
                     for i, (text, kind) in enumerate(rows)],
                )
                await q.index.add_many(project.id, [(first + i, kind, None, text, None) for i, (text, kind) in enumerate(rows)])
                if model is not None:
                    # One unit vector per model in force (a model id names each, joined by "+").
                    made = vectors.standard_normal((len(rows), len(model.split("+")), 384)).astype(numpy.float32)
                    made = (made / numpy.linalg.norm(made, axis=2, keepdims=True)).reshape(len(rows), -1)
                    await q.tx.run_many(
                        "INSERT INTO entry_vectors (seq, project_id, model, vector) VALUES (?, ?, ?, ?)",
                        [(first + i, project.id, model, made[i].tobytes()) for i in range(len(rows))],
                    )

            await hub.driver.write(unit)
            done += n
    finally:
        await hub.stop()
    return time.perf_counter() - started


# -- the load ---------------------------------------------------------------------------


async def drive(server: Server, tokens: dict[str, str], clients: int, requests: int) -> tuple[int, dict[int, int], float]:
    """A bounded mix of requests from `clients` concurrent clients; returns
    the peak RSS sampled meanwhile, the status counts and the elapsed time."""
    rng = random.Random(3)
    plan: list[tuple[str, str, Any, str]] = []
    for n in range(requests):
        roll = rng.random()
        if roll < 0.7:
            q = " ".join(rng.choices(VOCABULARY, cum_weights=WEIGHTS, k=rng.randint(2, 5)))
            plan.append(("GET", f"/v1/projects/bench/recall?q={q}", None, "read"))
        elif roll < 0.9:
            plan.append(("POST", "/v1/projects/bench/entries", {"kind": "fact", "statement": f"Learned under load {n}."}, "write"))
        else:
            plan.append(("GET", "/v1/projects/bench/entries?limit=50", None, "read"))
    plan.reverse()
    statuses: dict[int, int] = {}
    refusals: dict[int, str] = {}
    peak = server.rss()
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, server.rss())
            await asyncio.sleep(0.05)

    async def client(http: httpx.AsyncClient) -> None:
        while plan:
            method, path, body, level = plan.pop()
            r = await http.request(method, path, json=body, headers={"Authorization": f"Bearer {tokens[level]}"})
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code >= 400 and r.status_code not in refusals:
                refusals[r.status_code] = f"{method} {path.split('?')[0]}: {r.text[:200]}"

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    # Idle connections are dropped by the client before uvicorn's 5 s
    # keep-alive timeout can close one under a request being sent.
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as http:
        await asyncio.gather(*[client(http) for _ in range(clients)])
    elapsed = time.perf_counter() - started
    done.set()
    await sampler
    for status, example in sorted(refusals.items()):
        print(f"# refused under load ({status}): {example}", file=sys.stderr)
    return max(peak, server.rss()), statuses, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--dir", default=None, help="where the database goes (default a temporary folder)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        database_url = f"sqlite:///{folder}/memory.db"
        env = {
            **os.environ,
            "RELAYROOM_DATABASE_URL": database_url,
            "RELAYROOM_CHECKMAPS": str(Path(folder) / "checkmaps"),
            "RELAYROOM_SWEEP_INTERVAL": "0",
            "RELAYROOM_LOG_LEVEL": "warning",
            # The load learns more than an agent's hourly budget on purpose.
            "RELAYROOM_LEARN_PER_HOUR": str(10 * args.requests),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        (Path(folder) / "checkmaps").mkdir()
        tokens = asyncio.run(create_store(database_url))

        server = Server(env, Path(folder) / "serve.log")
        try:
            server.wait_ready()
            idle = settle(server)
        finally:
            server.stop()

        seconds = asyncio.run(load_entries(database_url, args.entries))
        print(f"# {args.entries:,} trusted entries written in {seconds:.1f} s", file=sys.stderr)

        server = Server(env, Path(folder) / "serve.log")
        try:
            server.wait_ready()
            loaded = settle(server)
            for q in ("database migration", "cache locale", "pooler prepared statement", "deploy tuesday", "retry timeout"):
                r = httpx.get(f"{server.url}/v1/projects/bench/recall", params={"q": q},
                              headers={"Authorization": f"Bearer {tokens['read']}"}, timeout=30)
                r.raise_for_status()
            recalled = settle(server)
            try:
                under_load, statuses, elapsed = asyncio.run(drive(server, tokens, args.clients, args.requests))
            except httpx.TransportError:
                print(f"# the server's log ends with:\n{server.log_tail()}", file=sys.stderr)
                raise
            after = settle(server)
            hwm = server.peak()
        finally:
            server.stop()

    rows = [
        ("idle (empty store)", idle),
        (f"loaded ({args.entries:,} trusted entries)", loaded),
        ("after 5 recalls", recalled),
        (f"under load (peak, {args.clients} clients)", under_load),
        ("after the load", after),
        ("kernel peak (VmHWM)", hwm),
    ]
    print(f"{'relayroom serve, 1 worker, SQLite':44} {'RSS MB':>8} {'x idle':>7}")
    for label, kib in rows:
        print(f"{label:44} {mb(kib):8.1f} {kib / idle:7.2f}")
    rate = args.requests / elapsed
    print(f"load: {args.requests} requests in {elapsed:.1f} s ({rate:.0f}/s), statuses {dict(sorted(statuses.items()))}")
    verdict = "meets" if mb(hwm) < TARGET_MB else "MISSES"
    print(f"target: under {TARGET_MB} MB with {args.entries:,} entries and under load: {verdict} ({mb(hwm):.1f} MB peak)")
    return 0 if mb(hwm) < TARGET_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
