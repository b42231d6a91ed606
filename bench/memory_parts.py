"""Where the serving process's resident memory goes: each part, in a fresh process.

    .venv/bin/python bench/memory_parts.py imports        # RSS after each big import, in the gateway's order
    .venv/bin/python bench/memory_parts.py session        # the model: tokenizer, session, runs, per option set
    .venv/bin/python bench/memory_parts.py session --arena-max 2   # the same under MALLOC_ARENA_MAX=2
    .venv/bin/python bench/memory_parts.py serve --entries 10000   # relayroom serve's RSS by mapping (smaps)

`imports`: one child process imports the packages `relayroom serve` imports
(SQLite, defaults), in the order it first imports them, and prints VmRSS
and its anonymous part (/proc/self/smaps_rollup) after each: what each adds.

`session`: per onnxruntime option set, a child process that has imported
what the gateway imports, loads the installed model's tokenizer, then its
session with those options, then embeds 200 questions one at a time on
worker threads (as recalls do, through asyncio.to_thread) and 1,000 entry
texts (as the fill job does); VmRSS after each step, the questions' p50 and
p90 in ms, and the effect of malloc_trim(0) at the end.

`serve`: `relayroom serve` (SQLite, defaults) on a store of `--entries`
trusted entries written as bench/memory.py writes them, ready and then after
5 recalls: its resident memory by mapping, from /proc/PID/smaps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# First imported by `relayroom serve` in this order (python -X importtime); grouped
# where one imports the other.  asyncpg is not imported on SQLite: measured last, apart.
IMPORTS = [
    ("gateway's stdlib (asyncio, ssl, json, logging, ...)", "import asyncio, ssl, json, logging, subprocess, argparse, dataclasses, datetime, hashlib, uuid, decimal, email, http, tempfile"),
    ("yaml, orjson", "import yaml, orjson"),
    ("PyJWT + cryptography", "import jwt, jwt.algorithms, cryptography.hazmat.primitives.asymmetric.rsa, cryptography.hazmat.primitives.asymmetric.ec"),
    ("httpx, click, rich, pygments, prometheus_client", "import httpx, click, rich, rich.console, pygments, prometheus_client"),
    ("pydantic (+ pydantic_core)", "import pydantic"),
    ("the mcp SDK (+ starlette, sse_starlette, opentelemetry)", "import mcp, mcp.server.lowlevel, mcp.server.streamable_http_manager, mcp.client.session"),
    ("uvicorn (+ httptools, websockets, watchfiles)", "import uvicorn, uvicorn.protocols.http.httptools_impl, uvicorn.protocols.websockets.websockets_sansio_impl"),
    ("sqlite3", "import sqlite3"),
    ("jinja2, itsdangerous", "import jinja2, itsdangerous"),
    ("numpy", "import numpy"),
    ("onnxruntime", "import onnxruntime"),
    ("tokenizers", "import tokenizers"),
    ("the gateway's own modules (gateway.cli.main, web, mcp, hub)", "import gateway.cli.main, gateway.hub, gateway.web.app, gateway.mcp.server"),
    ("asyncpg (PostgreSQL only; not imported on SQLite)", "import asyncpg"),
]

PROBE = r'''
import json, sys, time
def rollup():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[-1] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out
def mark(label):
    r = rollup()
    print(json.dumps({"label": label, "rss": r["Rss"], "anon": r["Anonymous"]}), flush=True)
'''


def run_child(code: str, env: dict[str, str] | None = None) -> list[dict[str, object]]:
    out = subprocess.run([sys.executable, "-c", PROBE + code], capture_output=True, text=True, cwd=str(ROOT),
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, check=False)
    if out.returncode:
        raise SystemExit(out.stderr)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def imports() -> None:
    code = 'mark("python, bare")\n' + "".join(f"{stmt}\nmark({label!r})\n" for label, stmt in IMPORTS)
    rows = run_child(code)
    print(f"{'step':62} {'RSS MB':>7} {'+MB':>6} {'anon +MB':>8}")
    prev = None
    for row in rows:
        rss, anon = int(row["rss"]) / 1024, int(row["anon"]) / 1024  # type: ignore[call-overload]
        d = "" if prev is None else f"{rss - prev[0]:+6.1f} {anon - prev[1]:+8.1f}"
        print(f"{row['label']:62} {rss:7.1f} {d}")
        prev = (rss, anon)


SESSION = r'''
import asyncio, ctypes, os, time, random
import gateway.cli.main, gateway.hub, gateway.web.app, gateway.mcp.server
import numpy, onnxruntime
from tokenizers import Tokenizer
from gateway.recall.model import resolve
from gateway.recall import semantic
files = resolve(None, None)
mark("gateway imported")
tok = Tokenizer.from_file(str(files.tokenizer)); tok.enable_truncation(256); tok.enable_padding()
mark("tokenizer loaded")
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
OPTS = json.loads(sys.argv[1])
if "arena" in OPTS: options.enable_cpu_mem_arena = OPTS["arena"]
if "pattern" in OPTS: options.enable_mem_pattern = OPTS["pattern"]
for k, v in OPTS.get("config", {}).items(): options.add_session_config_entry(k, v)
if "level" in OPTS: options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, OPTS["level"])
if OPTS.get("env_arena"):
    mem = onnxruntime.OrtMemoryInfo("Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, onnxruntime.OrtMemType.DEFAULT)
    onnxruntime.create_and_register_allocator(mem, onnxruntime.OrtArenaCfg(0, 1, -1, -1))  # kSameAsRequested
    options.add_session_config_entry("session.use_env_allocators", "1")
session = onnxruntime.InferenceSession(str(files.model), options, providers=["CPUExecutionProvider"])
mark("session created")
enc = semantic.Encoder.__new__(semantic.Encoder)
enc.tokenizer, enc.session, enc._numpy = tok, session, numpy
enc.inputs = {i.name for i in session.get_inputs()}
enc.dimension = 384
words = "test build run install config database migration deploy release docs lint format error cache server client api request response token branch commit review plugin module package version log debug timeout retry queue worker thread async".split()
rng = random.Random(3)
qs = ["how should I " + " ".join(rng.choices(words, k=rng.randint(6, 14))) for _ in range(200)]
es = [rng.choice(["fact", "pitfall"]) + ": " + " ".join(rng.choices(words, k=rng.randint(10, 60))).capitalize() + "." for _ in range(1000)]
times = []
async def ask():
    for q in qs:
        t = time.perf_counter(); await asyncio.to_thread(enc.encode, [q]); times.append(time.perf_counter() - t)
asyncio.run(ask())
mark("200 questions (worker threads)")
async def fill():
    for i in range(0, len(es), 256):
        await asyncio.to_thread(enc.encode_many, es[i:i + 256])
asyncio.run(fill())
mark("1,000 entries (fill job)")
times.sort()
print(json.dumps({"p50": times[len(times) // 2] * 1000, "p90": times[int(len(times) * 0.9)] * 1000}))
ctypes.CDLL("libc.so.6").malloc_trim(0)
mark("after malloc_trim(0)")
'''

VARIANTS = {
    "default (today)": {},
    "arena off": {"arena": False},
    "mem pattern off": {"pattern": False},
    "arena off + pattern off": {"arena": False, "pattern": False},
    "env arena, same as requested": {"env_arena": True},
    "prepacking off": {"config": {"session.disable_prepacking": "1"}},
    "graph optimisation basic": {"level": "ORT_ENABLE_BASIC"},
    "arena off + pattern off + prepacking off": {"arena": False, "pattern": False, "config": {"session.disable_prepacking": "1"}},
}


def session(arena_max: int | None, only: list[str]) -> None:
    env = {"MALLOC_ARENA_MAX": str(arena_max)} if arena_max else {}
    for name, opts in VARIANTS.items():
        if only and name not in only:
            continue
        out = subprocess.run([sys.executable, "-c", PROBE + SESSION, json.dumps(opts)], capture_output=True, text=True,
                             cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=False)
        if out.returncode:
            print(f"{name}: failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        marks = [m for m in lines if "label" in m]
        timing = next(m for m in lines if "p50" in m)
        steps = "  ".join(f"{m['label']}: {int(m['rss']) / 1024:.1f}" for m in marks)
        print(f"{name}{' (MALLOC_ARENA_MAX=' + str(arena_max) + ')' if arena_max else ''}: p50 {timing['p50']:.2f} ms, p90 {timing['p90']:.2f} ms")
        print(f"    {steps}")


def smaps(pid: int) -> dict[str, int]:
    """Resident KiB of a process by mapping: each shared library, the brk
    heap, and the anonymous mappings (glibc's thread arenas, numpy's and
    onnxruntime's big blocks, thread stacks)."""
    groups: dict[str, int] = {}
    name = ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                path = head[5] if len(head) > 5 else "[anonymous]"
                name = path if path.startswith("[") else Path(path).name.split(".cpython")[0]
            elif head[0] == "Rss:":
                groups[name] = groups.get(name, 0) + int(head[1])
    return groups


def serve(entries: int, arena_max: int | None, requests: int) -> None:
    import asyncio
    import tempfile

    import httpx

    sys.path.insert(0, str(ROOT))
    from bench.memory import Server, create_store, drive, load_entries, settle

    with tempfile.TemporaryDirectory() as folder:
        database_url = f"sqlite:///{folder}/memory.db"
        env = {**os.environ, "RELAYROOM_DATABASE_URL": database_url, "RELAYROOM_CHECKMAPS": str(Path(folder) / "checkmaps"),
               "RELAYROOM_SWEEP_INTERVAL": "0", "RELAYROOM_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT),
               **({"MALLOC_ARENA_MAX": str(arena_max)} if arena_max else {})}
        (Path(folder) / "checkmaps").mkdir()
        tokens = asyncio.run(create_store(database_url))
        if entries:
            asyncio.run(load_entries(database_url, entries))
        server = Server(env, Path(folder) / "serve.log")
        try:
            server.wait_ready()
            steps = [("ready", settle(server), smaps(server.proc.pid))]
            for q in ("database migration", "cache locale", "pooler prepared statement", "deploy tuesday", "retry timeout"):
                httpx.get(f"{server.url}/v1/projects/bench/recall", params={"q": q},
                          headers={"Authorization": f"Bearer {tokens['read']}"}, timeout=60).raise_for_status()
            steps.append(("after 5 recalls", settle(server), smaps(server.proc.pid)))
            if requests:
                asyncio.run(drive(server, tokens, 32, requests))
                steps.append((f"after {requests} requests", settle(server), smaps(server.proc.pid)))
        finally:
            server.stop()
    names = sorted(set().union(*(m for _, _, m in steps)), key=lambda n: -steps[-1][2].get(n, 0))
    print(f"relayroom serve, {entries:,} entries{', MALLOC_ARENA_MAX=' + str(arena_max) if arena_max else ''}: "
          + ", ".join(f"{label} {kib / 1024:.1f} MB" for label, kib, _ in steps))
    print(f"{'mapping, MB':40}" + "".join(f" {label[:16]:>16}" for label, _, _ in steps))
    other = [0] * len(steps)
    for n in names:
        kib = [m.get(n, 0) for _, _, m in steps]
        if max(kib) < 1024:
            other = [o + k for o, k in zip(other, kib)]
            continue
        print(f"{n:40}" + "".join(f" {k / 1024:16.1f}" for k in kib))
    print(f"{'(each under 1 MB)':40}" + "".join(f" {k / 1024:16.1f}" for k in other))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["imports", "session", "serve"])
    parser.add_argument("--entries", type=int, default=10_000, help="serve: trusted entries in the store")
    parser.add_argument("--requests", type=int, default=0, help="serve: then bench/memory.py's mixed load (32 clients)")
    parser.add_argument("--arena-max", type=int, default=None)
    parser.add_argument("--only", action="append", default=[], help="run only this option set (repeatable)")
    args = parser.parse_args()
    if args.what == "imports":
        imports()
    elif args.what == "serve":
        serve(args.entries, args.arena_max, args.requests)
    else:
        session(args.arena_max, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
