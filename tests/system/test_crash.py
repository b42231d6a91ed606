"""Crash safety: SIGKILL a real `relayroom serve` mid-load, restart it on the
same store, and find every acknowledged write whole.

The promise under test: a 2xx means committed.  A request answered before the
kill must be in the store after the restart, with everything its transaction
wrote (the entry and its `learn` row, the contradiction and its `contradict`
row, the owner's promotion and its `override` row, the attestation and the
supports that cite it); a request cut off by the kill may be absent, but never
half there.  The load is bounded (LOAD requests, kill after KILL_AFTER
acknowledgements) and runs on loopback only.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.clock import SystemClock
from gateway.core.config import Config
from gateway.hub import Hub
from tests.conftest import free_port
from tests.support.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.slow

LOAD = 300
KILL_AFTER = 150
CONCURRENCY = 16
SEEDS = 40  # entries written before the load: half get contradicted, half confirmed
ATTEST_SEEDS = 10  # entries the check map maps to checks; CI attestations support and promote them
ATTESTATIONS = 60
CHECKS = {"unit-tests": range(0, 5), "integration": range(5, 10), "lint": range(0, 10)}
WRITERS = ("agent-1", "agent-2", "agent-3", "agent-4")
REPO = Path(__file__).resolve().parents[2]


# -- the server as a child process -------------------------------------------------


class ServeProcess:
    """`relayroom serve` in a child process we started; stopped by its pid only."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            cwd=str(REPO),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    async def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"relayroom serve exited with {self.proc.returncode}")
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError("relayroom serve did not become ready")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no flush, no goodbye."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


# -- the load ---------------------------------------------------------------------------


@dataclass
class Op:
    """One request of the load, and what its acknowledgement promises."""

    kind: str  # learn | note | contradict | confirm | attest
    method: str
    path: str
    token: str
    principal: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    target: str | None = None  # the entry a contradict or confirm names
    statement: str | None = None


@dataclass
class Ack:
    op: Op
    status: int
    body: Any


@dataclass
class Seeded:
    tokens: dict[str, str]
    contradict_targets: list[tuple[str, str]]  # (entry id, its author)
    confirm_targets: list[str]
    attest_targets: list[str]


def seed_word(i: int) -> str:
    # A made-up word per seed, so a recall for it finds that entry alone.
    return f"zqseed{i:03d}"


async def seed_store(database_url: str) -> Seeded:
    """Project, tokens and the entries the load will contradict or confirm,
    written straight through the core before the server starts."""
    hub = Hub(Config.from_env({}, database_url=database_url, sweep_interval=0.0), clock=SystemClock())
    await hub.start(background=False)
    try:
        await hub.accounts.create_project("acme")
        tokens = {"olivia": await hub.accounts.create_token("acme", "owner", "olivia")}
        tokens["reader-1"] = await hub.accounts.create_token("acme", "read", "reader-1")
        for name in WRITERS:
            tokens[name] = await hub.accounts.create_token("acme", "write", name)
        owner = await hub.accounts.authenticate(tokens["olivia"])
        # Every contradiction in the load must be applied, not rate limited.
        await hub.accounts.update_settings(owner, {"demotions_per_hour": 10_000})
        contradict, confirm, attest = [], [], []
        for i in range(SEEDS + ATTEST_SEEDS):
            author = WRITERS[i % len(WRITERS)]
            principal = await hub.accounts.authenticate(tokens[author])
            entry, _ = await hub.knowledge.learn(principal, "fact", f"Seed fact {seed_word(i)} written before the crash.")
            if i < SEEDS // 2:
                contradict.append((entry.id, author))
            elif i < SEEDS:
                confirm.append(entry.id)
            else:
                attest.append(entry.id)
        return Seeded(tokens, contradict, confirm, attest)
    finally:
        await hub.stop()


def build_load(seeded: Seeded, extra: list[Op]) -> list[Op]:
    rng = random.Random(7)
    ops: list[Op] = []
    for entry_id, author in seeded.contradict_targets:
        ops.append(Op("contradict", "POST", "/v1/projects/acme/events", seeded.tokens[author], author,
                      {"type": "error", "detail": {"contradicts": entry_id, "note": "failed under load"}}, target=entry_id))
    for entry_id in seeded.confirm_targets:
        ops.append(Op("confirm", "POST", f"/v1/projects/acme/entries/{entry_id}/confirm", seeded.tokens["olivia"], "olivia",
                      target=entry_id))
    for n in range(40):
        writer = WRITERS[n % len(WRITERS)]
        ops.append(Op("note", "POST", "/v1/projects/acme/events", seeded.tokens[writer], writer,
                      {"type": "note", "detail": {"n": n}}))
    ops.extend(extra)
    n = 0
    while len(ops) < LOAD:
        writer = WRITERS[n % len(WRITERS)]
        statement = f"Learned under load zqload{n:04d} by {writer}."
        ops.append(Op("learn", "POST", "/v1/projects/acme/entries", seeded.tokens[writer], writer,
                      {"kind": "pitfall", "statement": statement, "evidence": f"load step {n}"}, statement=statement))
        n += 1
    rng.shuffle(ops)
    return ops


async def drive_until_killed(server: ServeProcess, ops: list[Op]) -> tuple[list[Ack], int]:
    """Send `ops` with CONCURRENCY clients; SIGKILL the server the moment the
    KILL_AFTER-th acknowledgement arrives.  Returns the acknowledgements and
    how many requests were cut off (sent, never answered)."""
    acks: list[Ack] = []
    cut_off = 0
    queue = list(reversed(ops))
    killed = asyncio.Event()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal cut_off
        while queue and not killed.is_set():
            op = queue.pop()
            headers = {"Authorization": f"Bearer {op.token}", **op.headers}
            try:
                if op.body is None:
                    r = await client.request(op.method, op.path, headers=headers)
                else:
                    r = await client.request(op.method, op.path, json=op.body, headers=headers)
            except httpx.TransportError:
                cut_off += 1
                continue
            acks.append(Ack(op, r.status_code, r.json() if r.content else None))
            if len(acks) >= KILL_AFTER and not killed.is_set():
                killed.set()
                server.kill()

    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=server.url, timeout=10.0, limits=limits) as client:
        await asyncio.wait_for(asyncio.gather(*[worker(client) for _ in range(CONCURRENCY)]), 60)
    return acks, cut_off


# -- what must be true after the restart ------------------------------------------------


async def check_through_the_api(url: str, seeded: Seeded, acks: list[Ack]) -> None:
    owner = {"Authorization": f"Bearer {seeded.tokens['olivia']}"}
    reader = {"Authorization": f"Bearer {seeded.tokens['reader-1']}"}
    seed_words = {}
    for i, (entry_id, _) in enumerate(seeded.contradict_targets):
        seed_words[entry_id] = seed_word(i)
    for i, entry_id in enumerate(seeded.confirm_targets):
        seed_words[entry_id] = seed_word(i + SEEDS // 2)
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
        for ack in acks:
            op = ack.op
            if op.kind == "learn":
                r = await client.get(f"/v1/projects/acme/entries/{ack.body['id']}", headers=owner)
                assert r.status_code == 200, f"acknowledged learn {ack.body['id']} lost: {r.text}"
                entry = r.json()
                assert (entry["statement"], entry["created_by"], entry["state"]) == (op.statement, op.principal, "candidate")
            elif op.kind in ("contradict", "confirm"):
                assert op.target is not None
                entry = (await client.get(f"/v1/projects/acme/entries/{op.target}", headers=owner)).json()
                found = (await client.get("/v1/projects/acme/recall", params={"q": seed_words[op.target]}, headers=reader)).json()
                recalled = [e["id"] for e in found["entries"]]
                if op.kind == "contradict":
                    assert entry["state"] == "contradicted", entry
                    assert [c["by"] for c in entry["contradictions"]] == [op.principal]
                    assert recalled == []
                else:
                    assert (entry["state"], entry["promoted_by"]) == ("trusted", "owner:olivia"), entry
                    assert recalled == [op.target], "a confirmed entry is missing from the recall index"
            elif op.kind == "attest":
                assert ack.body["counted"] == (op.body["outcome"] == "success" and op.body["check"] in CHECKS), ack.body
                for support in ack.body["supports"]:
                    entry = (await client.get(f"/v1/projects/acme/entries/{support['entry_id']}", headers=owner)).json()
                    cited = [s["attestation_id"] for s in entry["supports"]]
                    if not support["duplicate"]:
                        assert ack.body["attestation_id"] in cited, f"acknowledged support lost: {support}"
                for entry_id in ack.body["promoted"]:
                    entry = (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=owner)).json()
                    assert (entry["state"], entry["promoted_by"]) == ("trusted", "issuers"), entry
                    assert entry["distinct_issuers"] >= 2


async def check_store_is_whole(database_url: str, acks: list[Ack]) -> None:
    hub = Hub(Config.from_env({}, database_url=database_url, sweep_interval=0.0), clock=SystemClock())
    await hub.start(background=False)

    async def rows(sql: str, *args: Any) -> list[dict[str, Any]]:
        return await hub.driver.read(lambda q: q.tx.all(sql, *args))

    try:
        # Every acknowledged event and attestation is there.
        event_ids = {r["id"]: r for r in await rows("SELECT id, effect, principal FROM events")}
        attestation_ids = {r["id"] for r in await rows("SELECT id FROM attestations")}
        for ack in acks:
            if ack.op.kind in ("note", "contradict"):
                stored = event_ids.get(ack.body["event_id"])
                assert stored is not None, f"acknowledged event {ack.body['event_id']} lost"
                assert stored["effect"] == ack.body["effect"] and stored["principal"] == ack.op.principal
            if ack.op.kind == "attest":
                assert ack.body["attestation_id"] in attestation_ids, f"acknowledged attestation {ack.body['attestation_id']} lost"

        # Nothing half-written: each move has the ledger row its transaction wrote with it.
        orphans = await rows(
            "SELECT e.id FROM entries e WHERE NOT EXISTS "
            "(SELECT 1 FROM audit a WHERE a.entry_id = e.id AND a.action = 'learn')"
        )
        assert orphans == [], f"entries without their learn row: {orphans}"
        unaudited_owner = await rows(
            "SELECT e.id FROM entries e WHERE e.promoted_by LIKE 'owner:%' AND NOT EXISTS "
            "(SELECT 1 FROM audit a WHERE a.entry_id = e.id AND a.action = 'override')"
        )
        assert unaudited_owner == []
        unaudited_issuers = await rows(
            "SELECT e.id FROM entries e WHERE e.promoted_by = 'issuers' AND NOT EXISTS "
            "(SELECT 1 FROM audit a WHERE a.entry_id = e.id AND a.action = 'promote')"
        )
        assert unaudited_issuers == []
        mismatched = await rows(
            "SELECT e.id FROM entries e WHERE "
            "(SELECT COUNT(*) FROM contradictions c WHERE c.entry_seq = e.seq) <> "
            "(SELECT COUNT(*) FROM audit a WHERE a.entry_id = e.id AND a.action = 'contradict')"
        )
        assert mismatched == [], f"contradictions without their ledger row (or the reverse): {mismatched}"
        contradicted_without_record = await rows(
            "SELECT e.id FROM entries e WHERE e.state = 'contradicted' AND NOT EXISTS "
            "(SELECT 1 FROM contradictions c WHERE c.entry_seq = e.seq)"
        )
        assert contradicted_without_record == []
        # An applied `error` event and the contradiction it caused were one transaction.
        contradictions = {
            (r["id"], r["by_principal"])
            for r in await rows("SELECT e.id, c.by_principal FROM contradictions c JOIN entries e ON e.seq = c.entry_seq")
        }
        for event in await rows("SELECT principal, detail FROM events WHERE effect = 'contradicted'"):
            target = json.loads(event["detail"])["contradicts"]
            assert (target, event["principal"]) in contradictions, f"event applied without its contradiction: {target}"
        unsourced_supports = await rows(
            "SELECT s.id FROM supports s WHERE s.attestation_id IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM attestations t WHERE t.id = s.attestation_id)"
        )
        assert unsourced_supports == [], "supports whose attestation is missing"
        support_rows = await rows("SELECT COUNT(*) AS n FROM supports")
        support_audit = await rows("SELECT COUNT(*) AS n FROM audit WHERE action = 'support'")
        assert support_rows[0]["n"] == support_audit[0]["n"]
        twice = await rows("SELECT statement FROM entries GROUP BY project_id, statement HAVING COUNT(*) > 1")
        assert twice == [], "a statement stored twice"
    finally:
        await hub.stop()


def check_sqlite_file(database_url: str) -> None:
    path = database_url[len("sqlite:///"):]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'fts_p%' "
                                     "AND sql LIKE 'CREATE VIRTUAL TABLE%'").fetchall():
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")  # raises when corrupt
    finally:
        conn.close()


# -- the test ---------------------------------------------------------------------------------


def write_checkmap(folder: Path, seeded: Seeded, github: OidcIssuer, gitlab: OidcIssuer) -> None:
    """Two CI systems bound to acme (two issuers, so K=2 can be reached), and
    three checks over the attestation targets; `docs-build` stays unmapped."""
    lines = [
        "project: acme",
        "issuers:",
        "  - provider: github-actions",
        f"    issuer: {github.url}",
        "    repository: acme/api",
        '    repository_id: "123456"',
        '    repository_owner_id: "7890"',
        "    refs: [refs/heads/main]",
        "  - provider: gitlab",
        f"    issuer: {gitlab.url}",
        "    project_path: acme/api",
        '    project_id: "42"',
        "    refs: [main]",
        "checks:",
    ]
    for check, positions in CHECKS.items():
        ids = ", ".join(seeded.attest_targets[i] for i in positions)
        lines += [f"  {check}:", f"    supports: [{ids}]"]
    (folder / "acme.yaml").write_text("\n".join(lines) + "\n")


def attestation_ops(github: OidcIssuer, gitlab: OidcIssuer) -> list[Op]:
    """ATTESTATIONS signed tokens, each with its own jti, minted before the
    load so the load measures the gateway, not the signing.  The server's key
    cache is cold: the first runs of each CI system arrive together."""
    rng = random.Random(11)
    now = time.time()
    ops = []
    for n in range(ATTESTATIONS):
        ci = (github, gitlab)[n % 2]
        token = ci.github_token(now) if ci is github else ci.gitlab_token(now)
        name = rng.choice([*CHECKS, "docs-build"])
        outcome = "success" if n % 10 else "failure"
        ops.append(Op("attest", "POST", "/v1/attestations", token, f"ci-{n % 2}", {"check": name, "outcome": outcome}))
    return ops


async def test_sigkill_mid_load_loses_no_acknowledged_write(
    backend: str, database_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    seeded = await asyncio.wait_for(seed_store(database_url), 60)
    checkmaps = tmp_path / "checkmaps"
    checkmaps.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "RELAYROOM_DATABASE_URL": database_url,
        "RELAYROOM_CHECKMAPS": str(checkmaps),
        "RELAYROOM_SWEEP_INTERVAL": "0",
        "RELAYROOM_LOG_LEVEL": "warning",
        "RELAYROOM_ALLOW_INSECURE_ISSUERS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with OidcIssuer() as github, OidcIssuer() as gitlab:
        write_checkmap(checkmaps, seeded, github, gitlab)
        ops = build_load(seeded, attestation_ops(github, gitlab))

        first = ServeProcess(env, tmp_path / "serve-1.log")
        try:
            await first.wait_ready()
            acks, cut_off = await drive_until_killed(first, ops)
        finally:
            first.kill()
            first.stop()
    assert first.proc.returncode == -signal.SIGKILL
    assert len(acks) >= KILL_AFTER
    assert len(acks) < len(ops), "the load finished before the kill: nothing was cut off"
    refused = [(a.op.kind, a.status, a.body) for a in acks if a.status not in (200, 201, 202)]
    assert refused == [], f"requests refused under load: {refused[:5]}"

    second = ServeProcess(env, tmp_path / "serve-2.log")
    try:
        await second.wait_ready()
        await check_through_the_api(second.url, seeded, acks)
    finally:
        second.stop()
    await asyncio.wait_for(check_store_is_whole(database_url, acks), 60)
    if backend == "sqlite":
        check_sqlite_file(database_url)
    kinds = {k: sum(a.op.kind == k for a in acks) for k in ("learn", "note", "contradict", "confirm", "attest")}
    print(f"\n{backend}: {len(acks)} acknowledged {kinds}, {cut_off} cut off by the kill, "
          f"{time.monotonic() - started:.1f} s")
    assert time.monotonic() - started < 60

