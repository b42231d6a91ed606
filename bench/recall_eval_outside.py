"""The evaluation set asked as an agent asks it: through `relayroom serve`
over HTTP (`bench/recall_eval.py --outside`).

One server at the shipped defaults (`Server` of bench/outside.py: log level
`info`, the access log on, one worker) on a fresh store: a SQLite file in a
temporary folder, or a database of its own on the PostgreSQL server that
`RELAYROOM_DATABASE_URL` names (bench/stores.py).  `RELAYROOM_SEMANTIC_MODEL`
is passed on to the server (`off`: lexical recall alone); nothing else is set.

Before the server starts, the CLI creates one project per evaluation project,
and one project `pool` holding every entry (the pooled setting), each with an
owner token and a write token (the agent).  Over REST, the agent learns every
entry (`POST /v1/projects/{p}/entries`) and the owner confirms it (`POST
.../entries/{id}/confirm`), in the set's order.  When `GET /readyz` says the
ranking is fused, the bench waits until the server's fill job has written
every vector: no public signal says so, so it counts the store's unfilled
vector rows, as bench/recall_outside.py does.  Then every question is asked
with `GET /v1/projects/{p}/recall?q=...&limit=10` and the agent's token, and
the answers' ids and scores are all the figures read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx

from bench.outside import Server, workdir
from bench.recall_outside import wait_for_vectors
from bench.stores import bench_database

if TYPE_CHECKING:
    from bench.recall_eval import Query

POOL = "pool"
Answer = tuple["Query", list[str], list[float]]  # the question, the eval ids returned, their scores


def cli(url: str, *args: str) -> str:
    """`relayroom ARGS` on the store at `url`; the last line of its stdout (a new token's secret)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env["RELAYROOM_DATABASE_URL"] = url
    done = subprocess.run([sys.executable, "-m", "gateway", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"relayroom {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip().splitlines()[-1]


def provision(url: str, slugs: list[str]) -> dict[str, tuple[str, str]]:
    """Each project, created with the CLI: slug -> (owner token, agent token)."""
    tokens = {}
    for slug in slugs:
        cli(url, "project", "create", slug)
        owner = cli(url, "token", "create", "--project", slug, "--level", "owner", "--name", "eval-owner")
        agent = cli(url, "token", "create", "--project", slug, "--level", "write", "--name", "eval-agent")
        tokens[slug] = (owner, agent)
    return tokens


def expect(response: httpx.Response, status: int) -> dict[str, Any]:
    if response.status_code != status:
        raise SystemExit(f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}")
    body: dict[str, Any] = response.json()
    return body


def teach(client: httpx.Client, slug: str, owner: str, agent: str, items: list[dict[str, Any]]) -> dict[str, str]:
    """Every item learned by the agent and confirmed by the owner: entry id -> eval id."""
    names = {}
    for item in items:
        body = {"kind": item["kind"], "statement": item["statement"]}
        if item.get("evidence"):
            body["evidence"] = item["evidence"]
        made = expect(client.post(f"/v1/projects/{slug}/entries", json=body, headers=bearer(agent)), 201)
        expect(client.post(f"/v1/projects/{slug}/entries/{made['id']}/confirm", headers=bearer(owner)), 200)
        names[made["id"]] = item["id"]
    return names


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ask(client: httpx.Client, slug: str, agent: str, query: Query, names: dict[str, str], limit: int) -> Answer:
    found = expect(client.get(f"/v1/projects/{slug}/recall", params={"q": query.text, "limit": limit},
                              headers=bearer(agent)), 200)
    return query, [names[e["id"]] for e in found["entries"]], [e["score"] for e in found["entries"]]


def answers(entries: dict[str, list[dict[str, Any]]], queries: list[Query], settings: list[str],
            limit: int) -> tuple[dict[str, list[Answer]], dict[str, Any]]:
    """Every question's answer per setting ("per-project", "pooled"), and what the run saw of the server."""
    slugs = (list(entries) if "per-project" in settings else []) + ([POOL] if "pooled" in settings else [])
    out: dict[str, list[Answer]] = {}
    with workdir("relayroom-eval-") as work, bench_database(work, "eval") as url:
        (work / "checkmaps").mkdir()
        started = time.monotonic()
        tokens = provision(url, slugs)
        env = {"RELAYROOM_DATABASE_URL": url, "RELAYROOM_CHECKMAPS": str(work / "checkmaps")}
        # The model settings the bench was run with (RELAYROOM_SEMANTIC_MODEL, _PAIR).
        env.update({k: v for k, v in os.environ.items() if k.startswith("RELAYROOM_SEMANTIC_")})
        with Server(env, work) as server, httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as client:
            names: dict[str, dict[str, str]] = {}
            for slug in slugs:
                items = [item for items in entries.values() for item in items] if slug == POOL else entries[slug]
                names[slug] = teach(client, slug, *tokens[slug], items)
            taught = time.monotonic()
            recall = expect(client.get("/readyz"), 200)["recall"]
            waited = wait_for_vectors(url) if recall["ranking"] == "fused" else 0.0
            for setting in settings:
                out[setting] = []
                for q in queries:
                    slug = POOL if setting == "pooled" else q.project
                    out[setting].append(ask(client, slug, tokens[slug][1], q, names[slug], limit))
            asked = time.monotonic()
    about = {"ranking": recall["ranking"], "detail": recall["detail"], "server log lines": server.log_lines,
             "seconds": {"provision and learn": round(taught - started, 1), "vectors": round(waited, 1),
                         "questions": round(asked - taught - waited, 1)}}
    return out, about
