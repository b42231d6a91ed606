"""Real `relayroom serve` processes sharing one database, driven over HTTP on
127.0.0.1.

- Two gateways (two processes, two ports) on one database (PostgreSQL, and
  a SQLite file too) take
  200 concurrent attestations from two CI issuers for the same entries: one
  `promote` row per entry, no attestation lost, no support duplicated; a
  token replayed on the other process is refused; the demotion budget holds
  across both.
- `relayroom serve --workers 2` (two uvicorn worker processes; on SQLite
  writing one file under `BEGIN IMMEDIATE`) stays correct under concurrent
  learns and refutes, on both backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import httpx
import pytest

from gateway.core.config import Config
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding
from tests.conftest import ProjectTokens, free_port, make_project
from tests.support.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.slow

ENTRIES = 5
ATTESTATIONS = 200
CHECKS = ("unit-tests", "integration")


class Gateway:
    """One `relayroom serve` process on its own port; its log in a file."""

    def __init__(self, env: dict[str, str], log: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", str(self.port), *extra],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 40) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"gateway exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"gateway not ready in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def workers(self) -> list[int]:
        """Process ids of uvicorn's worker processes under this server (not
        multiprocessing's resource tracker, also a child)."""
        pid = self.process.pid
        found = []
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
                with contextlib.suppress(OSError):
                    if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                        found.append(int(child))
        return found


def gateway_env(database_url: str, checkmaps: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env.update(
        RELAYROOM_DATABASE_URL=database_url,
        RELAYROOM_CHECKMAPS=str(checkmaps),
        RELAYROOM_ALLOW_INSECURE_ISSUERS="1",
        RELAYROOM_LOG_LEVEL="warning",
    )
    return env


@contextlib.contextmanager
def gateways(env: dict[str, str], logs: Path, count: int, *extra: str) -> Iterator[list[Gateway]]:
    started = [Gateway(env, logs / f"gateway-{n}.log", *extra) for n in range(count)]
    try:
        for g in started:
            g.wait_ready()
        yield started
    finally:
        for g in started:
            g.stop()


@contextlib.asynccontextmanager
async def store(database_url: str, checkmaps: Path) -> AsyncIterator[Hub]:
    """The database as an operator's CLI sees it, for setup and for checking."""
    hub = Hub(Config.from_env({}, database_url=database_url, checkmaps=str(checkmaps), sweep_interval=0.0))
    await hub.start(background=False)
    try:
        yield hub
    finally:
        await hub.stop()


async def rows(hub: Hub, sql: str, *args: Any) -> list[dict[str, Any]]:
    return await hub.driver.read(lambda q: q.tx.all(sql, *args))


async def test_two_gateways_on_one_database_promote_each_entry_once_under_200_attestations(
    database_url: str, backend: str, tmp_path: Path, checkmap_dir: Path
) -> None:
    shared_url = database_url  # PostgreSQL, the backend for several processes; SQLite (one file) must hold too
    with OidcIssuer() as github, OidcIssuer() as gitlab:
        async with store(shared_url, checkmap_dir) as hub:
            tokens = await make_project(hub, "acme")
            project = await hub.accounts.project("acme")
            writer = Principal(project, "agent-7", "write")
            ids = [(await hub.knowledge.learn(writer, "convention", f"Shared convention {i}."))[0].id for i in range(ENTRIES)]
        (checkmap_dir / "acme.yaml").write_text(
            checkmap("acme", github_binding(github.url) + gitlab_binding(gitlab.url), {c: ids for c in CHECKS})
        )

        with gateways(gateway_env(shared_url, checkmap_dir), tmp_path, 2) as (a, b):
            now = time.time()
            rng = random.Random(6)
            requests = []
            for n in range(ATTESTATIONS):
                if rng.random() < 0.5:
                    token = github.github_token(now, run_id=str(9000 + n))
                else:
                    token = gitlab.gitlab_token(now, pipeline_id=str(9000 + n))
                requests.append(((a, b)[n % 2], token, CHECKS[rng.randrange(2)]))

            limits = httpx.Limits(max_connections=40)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:

                async def post(gateway: Gateway, token: str, check: str) -> httpx.Response:
                    return await client.post(
                        f"{gateway.url}/v1/attestations",
                        json={"check": check, "outcome": "success"},
                        headers={"Authorization": f"Bearer {token}"},
                    )

                started = time.perf_counter()
                answers = await asyncio.wait_for(asyncio.gather(*[post(*r) for r in requests]), 180)
                elapsed = time.perf_counter() - started

                assert [r.status_code for r in answers] == [201] * ATTESTATIONS, [
                    r.text for r in answers if r.status_code != 201
                ][:3]
                bodies = [r.json() for r in answers]
                promoted = [entry_id for body in bodies for entry_id in body["promoted"]]
                assert sorted(promoted) == sorted(ids)  # each entry promoted once, by one of the 200
                assert {body["issuer"] for body in bodies} == {f"oidc:{github.host}:acme", f"oidc:{gitlab.host}:acme"}

                # A token already used on one process is a replay on the other.
                replayed = github.github_token(time.time(), run_id="77")
                first, second = await asyncio.gather(post(a, replayed, "unit-tests"), post(b, replayed, "unit-tests"))
                assert sorted([first.status_code, second.status_code]) == [201, 409]
                refused = first if first.status_code == 409 else second
                assert refused.json()["error"]["code"] == "token_reused"

                # The demotion budget is one budget for both processes.
                settings = {"demotions_per_hour": 2}
                patched = await client.patch(f"{a.url}/v1/projects/acme/settings", json=settings, headers=tokens.auth(tokens.owner))
                assert patched.status_code == 200, patched.text
                reports = await asyncio.gather(
                    *[
                        client.post(
                            f"{(a, b)[n % 2].url}/v1/projects/acme/events",
                            json={"type": "error", "detail": {"contradicts": entry_id}},
                            headers=tokens.auth(tokens.other_writer),
                        )
                        for n, entry_id in enumerate(ids)
                    ]
                )
                assert sorted(r.status_code for r in reports) == [202, 202, 429, 429, 429]

        async with store(shared_url, checkmap_dir) as hub:
            assert (await rows(hub, "SELECT COUNT(*) AS n FROM attestations"))[0]["n"] == ATTESTATIONS + 1
            assert (await rows(hub, "SELECT COUNT(*) AS n FROM seen_tokens"))[0]["n"] == ATTESTATIONS + 1
            for entry_id in ids:
                actions = [r["action"] for r in await rows(hub, "SELECT action FROM audit WHERE entry_id = ?", entry_id)]
                assert actions.count("promote") == 1
                supports = await rows(hub, "SELECT issuer, source FROM supports s JOIN entries e ON e.seq = s.entry_seq WHERE e.id = ?", entry_id)
                fingerprints = [(r["issuer"], r["source"]) for r in supports]
                assert len(fingerprints) == len(set(fingerprints)) == 4  # two issuers x two checks, none twice
                assert actions.count("support") == 4
            assert (await rows(hub, "SELECT COUNT(*) AS n FROM audit WHERE action = 'rate_limited'"))[0]["n"] == 1
    print(f"\n{ATTESTATIONS} attestations over two gateway processes on {backend}: {elapsed:.2f} s ({ATTESTATIONS / elapsed:.0f}/s)")


async def test_two_uvicorn_workers_on_one_store_stay_correct(database_url: str, tmp_path: Path, checkmap_dir: Path) -> None:
    url = database_url  # on SQLite: two processes writing one file under BEGIN IMMEDIATE
    async with store(url, checkmap_dir) as hub:
        tokens: ProjectTokens = await make_project(hub, "acme")
        owner = await hub.accounts.authenticate(tokens.owner)
        await hub.accounts.update_settings(owner, {"demotions_per_hour": 5})

    with gateways(gateway_env(url, checkmap_dir), tmp_path, 1, "--workers", "2") as (server,):
        deadline = time.monotonic() + 20
        while len(server.workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(server.workers()) == 2, "uvicorn did not start two workers"

        # Fresh connections per request so the kernel spreads them over both workers.
        async def call(method: str, path: str, token: str, body: Any = None) -> httpx.Response:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                return await client.request(method, path, json=body, headers=tokens.auth(token))

        distinct = [call("POST", "/v1/projects/acme/entries", tokens.writer, {"kind": "fact", "statement": f"Fact {i}."}) for i in range(60)]
        same = [call("POST", "/v1/projects/acme/entries", tokens.writer, {"kind": "fact", "statement": "One statement, many callers."}) for _ in range(20)]
        answers = await asyncio.wait_for(asyncio.gather(*distinct, *same), 120)
        assert all(r.status_code in (200, 201) for r in answers), [r.text for r in answers if r.status_code >= 300][:3]
        created = [r.json()["id"] for r in answers[:60]]
        assert len(set(created)) == 60
        repeated = answers[60:]
        assert len({r.json()["id"] for r in repeated}) == 1
        assert sum(r.status_code == 201 for r in repeated) == 1

        for entry_id in created[:12]:
            confirmed = await call("POST", f"/v1/projects/acme/entries/{entry_id}/confirm", tokens.owner, {})
            assert confirmed.status_code == 200, confirmed.text
        refutes = await asyncio.gather(
            *[call("POST", f"/v1/projects/acme/entries/{entry_id}/refute", tokens.owner, {"reason": "wrong"}) for entry_id in created[:12]]
        )
        assert sorted(r.status_code for r in refutes) == [200] * 5 + [429] * 7
        assert all(r.json()["error"]["code"] == "rate_limited" for r in refutes if r.status_code == 429)

    async with store(url, checkmap_dir) as hub:
        assert (await rows(hub, "SELECT COUNT(*) AS n FROM entries"))[0]["n"] == 61
        assert (await rows(hub, "SELECT COUNT(*) AS n FROM audit WHERE action = 'learn'"))[0]["n"] == 61
        assert (await rows(hub, "SELECT COUNT(*) AS n FROM entries WHERE state = 'contradicted'"))[0]["n"] == 5
        assert (await rows(hub, "SELECT COUNT(*) AS n FROM audit WHERE action = 'rate_limited'"))[0]["n"] == 1


async def test_a_map_published_through_one_gateway_is_served_by_the_other_within_two_seconds(
    database_url: str, backend: str, tmp_path: Path, checkmap_dir: Path
) -> None:
    """Contract 5.6: every gateway process sharing the store serves the
    published map within 2 s; the other process has no folder of its own."""
    with OidcIssuer() as github:
        async with store(database_url, checkmap_dir) as hub:
            await make_project(hub, "acme")
            entry = (await hub.knowledge.learn(Principal(await hub.accounts.project("acme"), "agent-7", "write"),
                                               "convention", "Migrations run in staging first."))[0].id
        (checkmap_dir / "acme.yaml").write_text(checkmap("acme", github_binding(github.url), {}))
        empty = tmp_path / "no-maps"
        empty.mkdir()
        first = Gateway(gateway_env(database_url, checkmap_dir), tmp_path / "publishing.log")
        second = Gateway(gateway_env(database_url, empty), tmp_path / "serving.log")
        try:
            first.wait_ready()
            second.wait_ready()
            async with httpx.AsyncClient(timeout=30) as client:
                waits = []
                for n, check in enumerate(("migrations", "lint", "deploy")):
                    text = checkmap("acme", github_binding(github.url), {check: [entry]})
                    published = await client.post(f"{first.url}/v1/checkmaps", json={
                        "project": "acme", "path": "checkmaps/acme.yaml", "content": text},
                        headers={"Authorization": f"Bearer {github.github_token(time.time())}"})
                    assert published.status_code == 200 and published.json()["status"] == "applied", published.text
                    started = time.monotonic()
                    while True:
                        rows = (await client.get(f"{second.url}/readyz")).json()["checkmaps"]
                        if [r["sha256"] for r in rows if r.get("source") == "published"] == [published.json()["sha256"]]:
                            break
                        assert time.monotonic() - started < 2.0, f"not served within 2 s: {rows}"
                        await asyncio.sleep(0.05)
                    waits.append(time.monotonic() - started)
                    counted = await client.post(f"{second.url}/v1/attestations", json={"check": check, "outcome": "success"},
                                                headers={"Authorization": f"Bearer {github.github_token(time.time())}"})
                    assert counted.status_code == 201 and counted.json()["counted"] is True, counted.text
                print(f"served by the other process after {', '.join(f'{w:.2f}' for w in waits)} s")
        finally:
            first.stop()
            second.stop()
