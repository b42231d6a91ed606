"""Two checkouts of the gateway against each other, in the same minutes.

    .venv/bin/python bench/paired.py --before DIR [--after DIR] recall [--entries 30] [--others 0] [--rounds 10]
                                     [--connections 16] [--requests 3000]
    .venv/bin/python bench/paired.py --before DIR [--after DIR] attest [--rounds 10]
    .venv/bin/python bench/paired.py --before DIR [--after DIR] healthz [--rounds 10]

On a shared machine the same code's figures move by a quarter from one
run to the next, so a change of a few percent cannot be read off two runs
of `recall_outside.py` or `attest.py` made minutes apart.  Here both
versions serve at once: one store is built (by this checkout's code, so
both must read its schema), copied once per version, and each copy is
served by `relayroom serve` at the shipped defaults with `PYTHONPATH` set to
its checkout.  Round by round `wrk` sends the same batch to each (who goes
first alternates), and the figure is the median over rounds of the
per-round ratio after / before: server CPU per request (from /proc),
requests per second and the client's p99.  `--after` defaults to this checkout; `--before` is
typically a `git worktree add /tmp/before <commit>`.

recall: `--entries` trusted entries in one project, 64 agents' tokens (the
read budget is per agent), agent-style questions as in
`recall_outside.py`, 3,000 recalls a round.  attest: the 50 checks of
`attest.py`, one fresh GitHub-shaped token per attestation (each store copy
sees each jti once), 4,000 attestations a round over 64 connections.
healthz: `GET /healthz` on an empty store, 20,000 a round over 64
connections: the baseline the other scripts divide by, for a change that
may move it (the event loop, the HTTP stack, the access log).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.outside import Server, request_line, workdir, wrk_run  # noqa: E402

VERSIONS = ("before", "after")


def served(work: Path, trees: dict[str, str], env: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each version's environment: its own copy of the store, its own code."""
    out = {}
    for name, tree in trees.items():
        shutil.copy(work / "base.db", work / f"{name}.db")
        out[name] = {**env, "RELAYROOM_DATABASE_URL": f"sqlite:///{work / (name + '.db')}", "PYTHONPATH": tree}
    return out


def alternate(servers: dict[str, Server], batches: list[list[str]], connections: int, status: int) -> list[dict[str, Any]]:
    rows = []
    for r, batch in enumerate(batches):
        row = {}
        for name in VERSIONS if r % 2 == 0 else tuple(reversed(VERSIONS)):
            row[name] = wrk_run(servers[name].port, batch, connections, server_pid=servers[name].pid)
            if set(row[name]["statuses"]) != {status}:
                raise SystemExit(f"{name}: answers {row[name]['statuses']}, not all {status}")
        rows.append(row)
        print(f"round {r + 1}: " + ", ".join(
            f"{n} {row[n]['server_cpu_us']:.0f} us {row[n]['per_second']:.0f}/s p99 {row[n]['p99_ms']:.2f} ms"
            for n in VERSIONS), flush=True)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    for metric, unit in (("server_cpu_us", "us per request"), ("per_second", "requests/s"), ("p99_ms", "ms")):
        values = {n: [row[n][metric] for row in rows] for n in VERSIONS}
        paired = [a / b for a, b in zip(values["after"], values["before"])]
        spread = {n: f"{statistics.median(v):.{2 if metric == 'p99_ms' else 0}f} "
                     f"({min(v):.{2 if metric == 'p99_ms' else 0}f}-{max(v):.{2 if metric == 'p99_ms' else 0}f})"
                  for n, v in values.items()}
        print(f"{metric} ({unit}): before {spread['before']}, after {spread['after']}; "
              f"after / before, paired: median {statistics.median(paired):.3f} "
              f"({min(paired):.3f}-{max(paired):.3f}) over {len(paired)} rounds")


def recall(trees: dict[str, str], entries: int, others: int, rounds: int, connections: int, per: int) -> None:
    from bench.recall_latency import Text
    from bench.recall_outside import build, questions, recall_lines

    text = Text(seed=23)
    asked = questions(text, 400 + per * rounds)
    with workdir() as work:
        (work / "checkmaps").mkdir()
        *tokens, _ = asyncio.run(build(f"sqlite:///{work / 'base.db'}", entries, others))  # the last is an owner's
        lines = recall_lines(asked, tokens)
        envs = served(work, trees, {"RELAYROOM_CHECKMAPS": str(work / "checkmaps")})
        with Server(envs["before"], work) as before, Server(envs["after"], work) as after:
            servers = {"before": before, "after": after}
            for server in servers.values():
                wrk_run(server.port, lines[:400], 4)  # warm: page cache, statement caches
            batches = [lines[400 + r * per:400 + (r + 1) * per] for r in range(rounds)]
            rows = alternate(servers, batches, connections, 200)
    print(f"recall, {entries:,} entries in a hub of {others:,} others, {connections} connections, {per:,} recalls a round")
    report(rows)


def attest(trees: dict[str, str], rounds: int) -> None:
    from bench.attest import attestation_lines, mint, prepare
    from tests.support.oidc_issuer import OidcIssuer

    per = 4000
    with workdir() as work, OidcIssuer() as issuer:
        folder = work / "checkmaps"
        folder.mkdir()
        asyncio.run(prepare(f"sqlite:///{work / 'base.db'}", folder, issuer.url))
        tokens = mint(issuer, 600 + per * rounds)
        envs = served(work, trees, {"RELAYROOM_CHECKMAPS": str(folder), "RELAYROOM_ALLOW_INSECURE_ISSUERS": "1"})
        with Server(envs["before"], work) as before, Server(envs["after"], work) as after:
            servers = {"before": before, "after": after}
            warm = attestation_lines(tokens[:600])
            for server in servers.values():
                wrk_run(server.port, warm[:1] * 2, 1)  # the JWKS fetched once
                wrk_run(server.port, warm[1:], 64)  # every check's first support
            batches = [attestation_lines(tokens[600 + r * per:600 + (r + 1) * per]) for r in range(rounds)]
            rows = alternate(servers, batches, 64, 201)
    print(f"attestations, 64 connections, {per:,} a round")
    report(rows)


def healthz(trees: dict[str, str], rounds: int) -> None:
    from gateway.core.config import Config
    from gateway.hub import Hub

    async def create(url: str) -> None:
        hub = Hub(Config.from_env({}, database_url=url, sweep_interval=0.0))
        await hub.start(background=False)
        await hub.stop()

    per = 20_000
    with workdir() as work:
        (work / "checkmaps").mkdir()
        asyncio.run(create(f"sqlite:///{work / 'base.db'}"))
        envs = served(work, trees, {"RELAYROOM_CHECKMAPS": str(work / "checkmaps")})
        with Server(envs["before"], work) as before, Server(envs["after"], work) as after:
            servers = {"before": before, "after": after}
            lines = [request_line("GET", "/healthz")] * per
            for server in servers.values():
                wrk_run(server.port, lines[:2000], 64)
            rows = alternate(servers, [lines] * rounds, 64, 200)
    print(f"/healthz, 64 connections, {per:,} a round")
    report(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the checkout to compare against")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parent.parent))
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("recall")
    r.add_argument("--entries", type=int, default=30)
    r.add_argument("--others", type=int, default=0, help="trusted entries of other projects in the same store")
    r.add_argument("--requests", type=int, default=3000, help="recalls a round")
    r.add_argument("--rounds", type=int, default=10)
    r.add_argument("--connections", type=int, default=16)
    a = sub.add_parser("attest")
    a.add_argument("--rounds", type=int, default=10)
    h = sub.add_parser("healthz")
    h.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    if args.what == "recall":
        recall(trees, args.entries, args.others, args.rounds, args.connections, args.requests)
    elif args.what == "attest":
        attest(trees, args.rounds)
    else:
        healthz(trees, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
