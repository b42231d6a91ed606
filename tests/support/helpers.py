"""Small helpers shared by the API tests."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import httpx

from gateway.knowledge.model import Support


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def wait_healthy(url: str, proc: subprocess.Popen[Any], deadline: float) -> None:
    """Poll `url`/healthz until it answers 200; fail if `proc` exits first or
    `deadline` (a time.monotonic() value) passes."""
    while True:
        assert proc.poll() is None, f"the gateway process behind {url} exited at start"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the gateway at {url} did not come up"
        time.sleep(0.1)


def stop(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM, as a service manager stops the gateway; SIGKILL if it has not
    exited within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()


async def learn(client: httpx.AsyncClient, slug: str, token: str, statement: str, kind: str = "fact", **extra: Any) -> dict[str, Any]:
    r = await client.post(
        f"/v1/projects/{slug}/entries", json={"kind": kind, "statement": statement, **extra}, headers=bearer(token)
    )
    assert r.status_code in (200, 201), r.text
    return r.json()


async def support(hub: Any, slug: str, entry_id: str, issuer: str, source: str = "check-a") -> Any:
    """A verified issuer's support, straight into the core (the attestation
    intake calls the same function after verifying the credential)."""
    project = await hub.accounts.project(slug)
    now = hub.clock.now()

    async def unit(q: Any) -> Any:
        return await hub.knowledge.apply_support(q, project, entry_id, Support(issuer, source, None, now), now)

    return await hub.driver.write(unit)


async def audit_actions(hub: Any, slug: str, entry_id: str | None = None) -> list[str]:
    project = await hub.accounts.project(slug)
    rows = await hub.driver.read(lambda q: q.audit_rows(project.id, entry_id=entry_id, limit=1000))
    return [r["action"] for r in reversed(rows)]


async def snapshot(hub: Any) -> dict[str, int]:
    """Row counts of every table a request could change."""
    tables = [
        "projects", "tokens", "entries", "supports", "contradictions", "audit", "events", "recalls",
        "recall_results", "recall_uses", "attestations", "seen_tokens", "webhook_deliveries", "proposals",
        "thread_messages", "rate_limit_marks", "published_checkmaps",
    ]

    async def unit(q: Any) -> dict[str, int]:
        return {t: await q.count_rows(t) for t in tables}

    counts = await hub.driver.read(unit)
    states = await hub.driver.read(lambda q: q.tx.all("SELECT state, COUNT(*) AS n FROM entries GROUP BY state ORDER BY state"))
    counts.update({f"state:{r['state']}": int(r["n"]) for r in states})
    published = await hub.driver.read(lambda q: q.tx.all("SELECT state, sha256 FROM published_checkmaps ORDER BY id"))
    counts.update({f"published:{i}:{r['state']}:{r['sha256']}": 1 for i, r in enumerate(published)})
    return counts


async def settle(hub: Any) -> None:
    """Wait until writes answered before their commit (recall records) are
    committed: a durable write queued after them commits them too."""
    await hub.driver.write(lambda q: q.meta_get("schema_version"))
