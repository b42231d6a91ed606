"""Two gateways on one database: every rule that must hold across processes
is decided in the database, not in a process's memory.

Each test builds a second `Hub` on the database of the `hub` fixture: a second
asyncpg pool on PostgreSQL, a second writer connection on the same SQLite file
(`BEGIN IMMEDIATE` with a busy timeout).  Work is spread over both, all at
once.  The HTTP variants with real `relayroom serve` processes are in
`test_multiprocess_serve.py`.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, AsyncIterator

import pytest

from gateway.core.clock import DAY, HOUR, ManualClock
from gateway.core.config import Config
from gateway.core.errors import GatewayError
from gateway.hub import Hub
from gateway.core.ids import new_id
from gateway.knowledge.model import Support
from gateway.store import open_driver
from gateway.store.queries.attestations import Replay
from tests.conftest import ProjectTokens

ISSUERS = ("oidc:ci-a.example.com:acme", "oidc:ci-b.example.com:acme")
CHECKS = ("unit-tests", "integration")


@pytest.fixture
async def twin(config: Config, clock: ManualClock, hub: Hub) -> AsyncIterator[Hub]:
    """A second gateway on the same database (and the same manual clock)."""
    other = Hub(config, clock=clock)
    await other.start(background=False)
    try:
        yield other
    finally:
        await other.stop()


async def _candidates(hub: Hub, writer_token: str, count: int, prefix: str) -> list[str]:
    writer = await hub.accounts.authenticate(writer_token)
    return [(await hub.knowledge.learn(writer, "fact", f"{prefix} {i}."))[0].id for i in range(count)]


def _attestation(hub: Hub, slug: str, entry_ids: list[str], issuer: str, check: str) -> Any:
    """One verified attestation as the intake records it: the attestation row
    and a support of every entry its check maps to, in one transaction."""

    async def go() -> list[Any]:
        project = await hub.accounts.project(slug)
        now = hub.clock.now()
        attestation_id = new_id("at")

        async def unit(q: Any) -> list[Any]:
            await q.insert_attestation(attestation_id, project.id, issuer, check, "success", True, None, {"run": 1}, None, now)
            outcomes = []
            for entry_id in entry_ids:  # the check map's order: every unit locks entries in one order
                support = Support(issuer=issuer, source=check, attestation_id=attestation_id, at=now)
                outcomes.append(await hub.knowledge.apply_support(q, project, entry_id, support, now))
            return outcomes

        return await hub.driver.write(unit)

    return go()


async def _table(hub: Hub, sql: str, *args: Any) -> list[dict[str, Any]]:
    return await hub.driver.read(lambda q: q.tx.all(sql, *args))


async def test_two_hundred_attestations_on_two_gateways_promote_each_entry_once(
    hub: Hub, twin: Hub, acme: ProjectTokens
) -> None:
    entry_ids = await _candidates(hub, acme.writer, 5, "Shared by every check")
    rng = random.Random(6)
    calls = []
    for n in range(200):
        gateway = hub if n % 2 == 0 else twin
        calls.append(_attestation(gateway, "acme", entry_ids, ISSUERS[rng.randrange(2)], CHECKS[rng.randrange(2)]))
    results = await asyncio.wait_for(asyncio.gather(*calls), 120)

    assert len(results) == 200  # no attestation lost: every unit committed and answered
    assert (await _table(hub, "SELECT COUNT(*) AS n FROM attestations"))[0]["n"] == 200
    fingerprints = {(i, c) for i in ISSUERS for c in CHECKS}
    project = await hub.accounts.project("acme")
    for position, entry_id in enumerate(entry_ids):
        outcomes = [r[position] for r in results]
        assert sum(o.promoted for o in outcomes) == 1
        assert sum(not o.duplicate for o in outcomes) == len(fingerprints)
        entry = await hub.driver.read(lambda q, e=entry_id: q.entry(project.id, e))
        assert entry is not None and entry.state == "trusted" and entry.promoted_by == "issuers"
        # one support per fingerprint of issuer plus check, none duplicated
        assert sorted((s.issuer, s.source) for s in entry.supports) == sorted(fingerprints)
        actions = [
            r["action"]
            for r in await _table(hub, "SELECT action FROM audit WHERE entry_id = ? ORDER BY id", entry_id)
        ]
        assert actions.count("promote") == 1
        assert actions.count("support") == len(fingerprints)
    # The index holds each promoted entry once: recall finds them on both gateways.
    reader = await twin.accounts.authenticate(acme.reader)
    _, found = await twin.recall.recall(reader, "shared check", limit=50)
    assert sorted(e.id for e, _ in found) == sorted(entry_ids)


async def test_demotion_budget_holds_across_gateways(hub: Hub, twin: Hub, acme: ProjectTokens) -> None:
    owner = await hub.accounts.authenticate(acme.owner)
    await hub.accounts.update_settings(owner, {"demotions_per_hour": 3})
    entry_ids = await _candidates(hub, acme.writer, 12, "Refuted at once")
    for entry_id in entry_ids:
        await hub.knowledge.confirm(owner, entry_id)
    agents = [await gw.accounts.authenticate(acme.other_writer) for gw in (hub, twin)]

    async def report(n: int, entry_id: str) -> str:
        gateway = (hub, twin)[n % 2]
        try:
            return (await gateway.knowledge.post_event(agents[n % 2], "error", {"contradicts": entry_id}))[1]
        except GatewayError as exc:
            return exc.code

    effects = await asyncio.wait_for(asyncio.gather(*[report(n, e) for n, e in enumerate(entry_ids)]), 60)
    assert effects.count("contradicted") == 3, effects
    assert effects.count("rate_limited") == 9, effects
    contradicted = await _table(hub, "SELECT COUNT(*) AS n FROM entries WHERE state = 'contradicted'")
    assert contradicted[0]["n"] == 3
    limited = await _table(hub, "SELECT COUNT(*) AS n FROM audit WHERE action = 'rate_limited'")
    assert limited[0]["n"] == 1  # one ledger row per principal per hour, whichever gateway refused


async def test_one_statement_learned_on_two_gateways_is_stored_once(hub: Hub, twin: Hub, acme: ProjectTokens) -> None:
    writers = [await gw.accounts.authenticate(acme.writer) for gw in (hub, twin)]
    calls = [
        (hub, twin)[n % 2].knowledge.learn(writers[n % 2], "pitfall", "The pooler   cannot do PREPARED statements.")
        for n in range(30)
    ]
    results = await asyncio.wait_for(asyncio.gather(*calls), 60)
    assert len({entry.id for entry, _ in results}) == 1
    assert sum(not duplicate for _, duplicate in results) == 1
    rows = await _table(hub, "SELECT COUNT(*) AS n FROM audit WHERE action = 'learn'")
    assert rows[0]["n"] == 1


async def test_sweeps_on_two_gateways_retire_each_entry_once(
    hub: Hub, twin: Hub, acme: ProjectTokens, clock: ManualClock
) -> None:
    writer = await hub.accounts.authenticate(acme.writer)
    for i in range(40):
        await hub.knowledge.learn(writer, "fact", f"Short-lived fact {i}.", ttl_days=1)
    clock.advance(2 * DAY)
    retired = await asyncio.wait_for(asyncio.gather(hub.knowledge.sweep(), twin.knowledge.sweep(), hub.knowledge.sweep()), 60)
    assert sum(retired) == 40
    rows = await _table(hub, "SELECT COUNT(*) AS n FROM audit WHERE action = 'retire'")
    assert rows[0]["n"] == 40


async def test_settings_changed_on_two_gateways_keep_both_changes(hub: Hub, twin: Hub, acme: ProjectTokens) -> None:
    owners = [await gw.accounts.authenticate(acme.owner) for gw in (hub, twin)]
    changes = [{"k_distinct_issuers": 3}, {"window_days": 7}, {"playbook_top_n": 9}, {"demotions_per_hour": 4}]
    await asyncio.gather(
        *[(hub, twin)[n % 2].accounts.update_settings(owners[n % 2], change) for n, change in enumerate(changes * 3)]
    )
    settings = (await twin.accounts.project("acme")).settings
    assert (settings.k_distinct_issuers, settings.window_days, settings.playbook_top_n, settings.demotions_per_hour) == (
        3,
        7.0,
        9,
        4,
    )


async def test_projects_created_at_once_on_two_gateways(hub: Hub, twin: Hub) -> None:
    async def create(gateway: Hub) -> str:
        try:
            await gateway.accounts.create_project("raced")
            return "created"
        except GatewayError as exc:
            return exc.code

    outcomes = await asyncio.gather(*[create((hub, twin)[n % 2]) for n in range(6)])
    assert outcomes.count("created") == 1
    assert set(outcomes) - {"created"} <= {"project_exists", "write_conflict"}


async def test_stores_opened_at_once_migrate_once(database_url: str) -> None:
    """Several processes starting together: the schema is applied once
    (an advisory lock on PostgreSQL, BEGIN IMMEDIATE on SQLite)."""
    drivers = [open_driver(database_url) for _ in range(4)]
    await asyncio.wait_for(asyncio.gather(*[d.open() for d in drivers]), 60)
    try:
        versions = [await d.read(lambda q: q.meta_get("schema_version")) for d in drivers]
        assert len(set(versions)) == 1 and versions[0] is not None
        assert all(await asyncio.gather(*[d.ping() for d in drivers]))
    finally:
        for d in drivers:
            await d.close()


async def test_replay_and_delivery_stores_answer_once_across_gateways(hub: Hub, twin: Hub) -> None:
    now = hub.clock.now()

    async def jti(gateway: Hub) -> bool:
        return await gateway.driver.write(lambda q: q.reserve(Replay(True, "https://ci.example.com", "jti-1", now + HOUR), now))

    async def delivery(gateway: Hub) -> bool:
        return await gateway.driver.write(lambda q: q.reserve(Replay(False, "github", "run-9:attempt-1"), now))

    assert sum(await asyncio.gather(*[jti((hub, twin)[n % 2]) for n in range(20)])) == 1
    assert sum(await asyncio.gather(*[delivery((hub, twin)[n % 2]) for n in range(20)])) == 1

    # Once the token could no longer be accepted its key may be taken again, once.
    later = now + 2 * HOUR

    async def jti_later(gateway: Hub) -> bool:
        return await gateway.driver.write(lambda q: q.reserve(Replay(True, "https://ci.example.com", "jti-1", later + HOUR), later))

    assert sum(await asyncio.gather(*[jti_later((hub, twin)[n % 2]) for n in range(20)])) == 1
    rows = await _table(hub, "SELECT expires_at FROM seen_tokens")
    assert [r["expires_at"] for r in rows] == [later + HOUR]


async def test_write_budgets_hold_across_gateways(config: Config, clock: ManualClock, acme: ProjectTokens, hub: Hub) -> None:
    """An agent's hourly learn and event budgets are one budget, however
    many processes it spreads its calls over."""
    import dataclasses

    tight = dataclasses.replace(config, learn_per_hour=5, events_per_hour=4)
    first, second = Hub(tight, clock=clock), Hub(tight, clock=clock)
    await first.start(background=False)
    await second.start(background=False)
    try:
        gateways = (first, second)
        writers = [await gw.accounts.authenticate(acme.writer) for gw in gateways]

        async def learn(n: int) -> str:
            try:
                await gateways[n % 2].knowledge.learn(writers[n % 2], "fact", f"Budgeted fact {n}.")
                return "ok"
            except GatewayError as exc:
                return exc.code

        async def event(n: int) -> str:
            try:
                return (await gateways[n % 2].knowledge.post_event(writers[n % 2], "note", {"n": n}))[1]
            except GatewayError as exc:
                return exc.code

        learned = await asyncio.wait_for(asyncio.gather(*[learn(n) for n in range(16)]), 60)
        events = await asyncio.wait_for(asyncio.gather(*[event(n) for n in range(16)]), 60)
    finally:
        await first.stop()
        await second.stop()
    assert learned.count("ok") == 5 and set(learned) == {"ok", "rate_limited"}, learned
    assert events.count("none") == 4 and set(events) == {"none", "rate_limited"}, events
