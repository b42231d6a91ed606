"""`record_rerun`, the one-statement record of a CI rerun, on both stores:
it writes the replay key and the attestation row together, or nothing."""

from __future__ import annotations

from typing import Any

from gateway.hub import Hub
from gateway.knowledge.model import Support
from gateway.store.queries.attestations import Recorded, Replay
from tests.conftest import make_project
from tests.support.attest_fixtures import learn

ISSUER = "oidc:ci.example:acme"
NOW = 1_800_000_000.0


async def rerun(hub: Hub, replay: Replay, supports: tuple[str, ...], *, slug: str = "acme", at: float = NOW,
                reason: str | None = None) -> Recorded:
    async def unit(q: Any) -> Recorded:
        found: Recorded = await q.record_rerun(slug, replay, supports, f"at_{replay.key}_{at}", ISSUER, "unit",
                                               "success", reason, {"run": replay.key}, None, at)
        return found

    return await hub.driver.write_statement(unit)


async def counts(hub: Hub) -> tuple[int, int, int]:
    async def unit(q: Any) -> tuple[int, int, int]:
        return (await q.count_rows("attestations"), await q.count_rows("seen_tokens"),
                await q.count_rows("webhook_deliveries"))

    return await hub.driver.read(unit)


async def support(hub: Hub, entry_id: str) -> None:
    project = await hub.accounts.project("acme")

    async def unit(q: Any) -> None:
        await hub.knowledge.apply_support(q, project, entry_id, Support(ISSUER, "unit", None, NOW), NOW)

    await hub.driver.write(unit)


async def test_a_rerun_is_recorded_once_and_a_first_run_is_left_to_the_full_unit(hub: Hub) -> None:
    await make_project(hub, "acme")
    entry_id = await learn(hub, "acme", "Reruns are recorded in one statement.")
    token = Replay(True, "https://ci.example", "jti-1", NOW + 600)

    assert await rerun(hub, token, (entry_id,), slug="nowhere") == Recorded(None, 1, False)
    found = await rerun(hub, token, (entry_id,))
    assert (found.missing, found.recorded) == (1, False) and found.project_id is not None
    assert await counts(hub) == (0, 0, 0)  # a support to add: nothing written, the jti still unused

    await support(hub, entry_id)
    assert await rerun(hub, token, (entry_id, entry_id)) == Recorded(found.project_id, 0, True)
    assert await counts(hub) == (1, 1, 0)
    assert await rerun(hub, token, (entry_id,), at=NOW + 1) == Recorded(found.project_id, 0, False)
    assert await counts(hub) == (1, 1, 0)  # the reused jti changed nothing

    # A jti past its acceptance window is taken over, as reserve does.
    later = NOW + 700
    again = Replay(True, "https://ci.example", "jti-1", later + 600)
    assert (await rerun(hub, again, (entry_id,), at=later)).recorded
    assert await counts(hub) == (2, 1, 0)


async def test_an_uncounted_attestation_needs_no_support_and_a_delivery_key_is_kept(hub: Hub) -> None:
    await make_project(hub, "acme")
    delivery = Replay(False, ISSUER, "workflow_run:9:1")
    assert (await rerun(hub, delivery, (), reason="not_success")).recorded
    assert not (await rerun(hub, delivery, (), at=NOW + 1, reason="not_success")).recorded
    assert await counts(hub) == (1, 0, 1)
