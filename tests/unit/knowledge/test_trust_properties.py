"""Properties of the trust gate through the real store (SQLite file):

- for any sequence of agent actions (learn, events with any payload, recall,
  recall_used), no entry ever becomes trusted;
- for any interleaving of supports (and contradictions), an entry is promoted
  exactly once, and only with K distinct issuers and no live contradiction.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.clock import DAY, ManualClock
from gateway.core.config import Config
from gateway.core.errors import GatewayError
from gateway.hub import Hub
from gateway.knowledge.model import Support

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)

agent_action = st.one_of(
    st.tuples(st.just("learn"), st.sampled_from(["fact", "convention", "pitfall", "decision", "trusted", ""]), st.text(max_size=40)),
    st.tuples(
        st.just("event"),
        st.sampled_from(["error", "success", "support", "confirm", "promote", "attestation", "x"]),
        st.dictionaries(
            st.sampled_from(["contradicts", "supports", "state", "entry", "promote", "issuer", "trusted"]),
            json_values | st.just("@entry"),
            max_size=4,
        ),
    ),
    st.tuples(st.just("recall"), st.text(max_size=30), st.none()),
    st.tuples(st.just("used"), st.just("@recall"), st.just("@entry")),
)


async def _with_hub(work: Any, *, k: int = 2) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.from_env({}, database_url=f"sqlite:///{Path(tmp) / 'p.db'}", sweep_interval=0.0, checkmaps=tmp)
        clock = ManualClock(start=time.time())
        hub = Hub(config, clock=clock)
        await hub.start(background=False)
        try:
            await hub.accounts.create_project("acme", k=k)
            return await work(hub, clock)
        finally:
            await hub.stop()


async def _states(hub: Hub) -> list[str]:
    rows = await hub.driver.read(lambda q: q.tx.all("SELECT state FROM entries"))
    return [r["state"] for r in rows]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(agent_action, min_size=1, max_size=25), seeded=st.booleans())
def test_no_agent_action_sequence_makes_an_entry_trusted(actions: list[Any], seeded: bool) -> None:
    async def work(hub: Hub, clock: ManualClock) -> None:
        writer = await hub.accounts.authenticate(await hub.accounts.create_token("acme", "write", "agent-1"))
        reader = await hub.accounts.authenticate(await hub.accounts.create_token("acme", "read", "agent-2"))
        entry_ids: list[str] = []
        recall_ids: list[str] = []
        if seeded:  # a few candidates the agents did not write, to aim at
            other = await hub.accounts.authenticate(await hub.accounts.create_token("acme", "write", "agent-3"))
            entry_ids.append((await hub.knowledge.learn(other, "fact", "Seed candidate."))[0].id)
        for action in actions:
            try:
                if action[0] == "learn":
                    entry, _ = await hub.knowledge.learn(writer, action[1], action[2] or "x")
                    entry_ids.append(entry.id)
                elif action[0] == "event":
                    detail = {k: (entry_ids[-1] if v == "@entry" and entry_ids else v) for k, v in action[2].items()}
                    await hub.knowledge.post_event(writer, action[1], detail)
                elif action[0] == "recall":
                    recall_id, _ = await hub.recall.recall(reader, action[1])
                    recall_ids.append(recall_id)
                elif action[0] == "used" and recall_ids and entry_ids:
                    await hub.recall.used(reader, recall_ids[-1], entry_ids[-1])
            except GatewayError:
                pass  # refusals are fine; what matters is what never happens
            clock.advance(60)
        states = await _states(hub)
        assert "trusted" not in states
        audit = await hub.driver.read(lambda q: q.tx.all("SELECT action FROM audit WHERE action IN ('promote', 'override')"))
        assert audit == []

    asyncio.run(_with_hub(work))


support_step = st.one_of(
    st.tuples(st.just("support"), st.sampled_from(["oidc:gh:acme", "oidc:gl:acme", "webhook:canary:acme"]), st.sampled_from(["unit", "e2e"])),
    st.tuples(st.just("contradict"), st.sampled_from(["agent-1", "agent-2"]), st.none()),
    st.tuples(st.just("wait"), st.floats(min_value=0, max_value=40), st.none()),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(support_step, min_size=1, max_size=20), k=st.integers(min_value=1, max_value=3))
def test_any_interleaving_of_supports_promotes_once_and_only_when_allowed(steps: list[Any], k: int) -> None:
    async def work(hub: Hub, clock: ManualClock) -> None:
        project = await hub.accounts.project("acme")
        writer = await hub.accounts.authenticate(await hub.accounts.create_token("acme", "write", "agent-1"))
        agents = {
            "agent-1": writer,
            "agent-2": await hub.accounts.authenticate(await hub.accounts.create_token("acme", "write", "agent-2")),
        }
        entry, _ = await hub.knowledge.learn(writer, "fact", "The entry under test.")
        issuers: set[str] = set()
        contradicted = False
        promoted_times = 0
        for step in steps:
            now = clock.now()
            if step[0] == "support":
                issuers.add(step[1])

                async def unit(q: Any) -> Any:
                    return await hub.knowledge.apply_support(q, project, entry.id, Support(step[1], step[2], None, now), now)

                outcome = await hub.driver.write(unit)
                if outcome.promoted:
                    promoted_times += 1
                    # allowed only now: K distinct issuers, never contradicted before
                    assert len(issuers) >= k and not contradicted
            elif step[0] == "contradict":
                try:
                    await hub.knowledge.post_event(agents[step[1]], "error", {"contradicts": entry.id})
                    contradicted = True
                except GatewayError:
                    pass
            else:
                clock.advance(step[1] * DAY)
        assert promoted_times <= 1
        rows = await hub.driver.read(lambda q: q.audit_rows(project.id, entry_id=entry.id, limit=1000))
        assert [r["action"] for r in rows].count("promote") == promoted_times
        final = await hub.driver.read(lambda q: q.entry(project.id, entry.id))
        if promoted_times == 0 and not contradicted:
            assert final.state == "candidate"
            assert len(issuers) < k
        if contradicted:
            assert final.state == "contradicted"

    asyncio.run(_with_hub(work, k=k))
