"""Many simultaneous supports and refutes on one entry leave one consistent
state and exactly one audit row per move."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from gateway.core.errors import GatewayError
from gateway.knowledge.model import Support
from tests.conftest import ProjectTokens
from tests.support.helpers import audit_actions, bearer, learn


async def _support(hub: Any, project: Any, entry_id: str, issuer: str, source: str) -> Any:
    now = hub.clock.now()

    async def unit(q: Any) -> Any:
        return await hub.knowledge.apply_support(q, project, entry_id, Support(issuer, source, None, now), now)

    return await hub.driver.write(unit)


async def test_simultaneous_supports_promote_once(hub: Any, client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    entries = [await learn(client, "acme", acme.writer, f"Concurrent entry {i}.") for i in range(5)]
    issuers = [f"oidc:ci-{n}.example.com:acme" for n in range(4)]
    calls = [
        _support(hub, project, e["id"], issuer, f"check-{r}")
        for e in entries
        for issuer in issuers
        for r in range(3)
        for _ in range(2)  # each (issuer, check) twice: reruns
    ]
    outcomes = await asyncio.gather(*calls)
    for e in entries:
        mine = [o for o in outcomes if o.entry_id == e["id"]]
        assert sum(o.promoted for o in mine) == 1
        assert sum(not o.duplicate for o in mine) == len(issuers) * 3  # one support per fingerprint
        actions = await audit_actions(hub, "acme", e["id"])
        assert actions.count("promote") == 1
        assert actions.count("support") == len(issuers) * 3
        got = (await client.get(f"/v1/projects/acme/entries/{e['id']}", headers=bearer(acme.owner))).json()
        assert got["state"] == "trusted" and got["distinct_issuers"] == len(issuers)
        assert len(got["supports"]) == len(issuers) * 3


async def test_simultaneous_refutes_and_supports(hub: Any, client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    project = await hub.accounts.project("acme")
    entry = await learn(client, "acme", acme.writer, "Raced entry.")
    await client.post(f"/v1/projects/acme/entries/{entry['id']}/confirm", headers=bearer(acme.owner))
    agents = [await hub.accounts.authenticate(await hub.accounts.create_token("acme", "write", f"racer-{i}")) for i in range(8)]

    async def refute(principal: Any) -> str:
        try:
            return (await hub.knowledge.post_event(principal, "error", {"contradicts": entry["id"]}))[1]
        except GatewayError as exc:
            return exc.code

    calls: list[Any] = []
    for i in range(8):
        calls.append(refute(agents[i]))
        calls.append(refute(agents[i]))  # each agent twice: the second is a duplicate
        calls.append(_support(hub, project, entry["id"], f"oidc:ci-{i}:acme", "check"))
    results = await asyncio.gather(*calls)
    effects = [r for r in results if isinstance(r, str)]
    assert effects.count("contradicted") == 8 and effects.count("duplicate") == 8
    supports = [r for r in results if not isinstance(r, str)]
    got = (await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.owner))).json()
    actions = await audit_actions(hub, "acme", entry["id"])
    assert actions.count("contradict") == 8 and len(got["contradictions"]) == 8
    assert actions.count("support") == 8
    # support never lifts (or re-promotes) a contradicted entry
    assert not any(s.promoted for s in supports) and actions.count("promote") == 0
    assert got["state"] == "contradicted" and got["promoted_by"] == "owner:olivia"


async def test_concurrent_learns_of_one_statement_make_one_entry(hub: Any, acme: ProjectTokens) -> None:
    writer = await hub.accounts.authenticate(acme.writer)
    results = await asyncio.gather(*[hub.knowledge.learn(writer, "fact", "Same statement, many callers.") for _ in range(20)])
    assert len({entry.id for entry, _ in results}) == 1
    assert sum(not dup for _, dup in results) == 1


async def test_a_failing_unit_undoes_itself_alone(hub: Any, acme: ProjectTokens) -> None:
    writer = await hub.accounts.authenticate(acme.writer)
    project = await hub.accounts.project("acme")

    async def broken(q: Any) -> None:
        await q.audit(project.id, hub.clock.now(), "learn", None, "x", None)
        raise RuntimeError("a bug inside one unit")

    results = await asyncio.gather(
        hub.knowledge.learn(writer, "fact", "Before the broken unit."),
        hub.driver.write(broken),
        hub.knowledge.learn(writer, "fact", "After the broken unit."),
        return_exceptions=True,
    )
    assert isinstance(results[1], RuntimeError)
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    rows = await hub.driver.read(lambda q: q.audit_rows(project.id, limit=100))
    assert [r["actor"] for r in rows].count("x") == 0
    # the writer is still alive
    await hub.knowledge.learn(writer, "fact", "The writer survived.")
