"""A contradiction's window is fixed when it is recorded: changing the
project's window later moves no contradiction already on an entry.  Through
the knowledge service, on both stores."""

from __future__ import annotations

import pytest

from gateway.core.clock import DAY, ManualClock, to_rfc3339
from gateway.core.errors import Conflict
from gateway.hub import Hub
from tests.conftest import make_project


async def contradicted_entry(hub: Hub, window_days: float) -> tuple[str, str, float]:
    """A project with `window_days`, one trusted entry another agent
    contradicts now: (the owner's token, the entry id, when the contradiction
    was recorded)."""
    tokens = await make_project(hub, "acme", window_days=window_days)
    writer = await hub.accounts.authenticate(tokens.writer)
    entry, _ = await hub.knowledge.learn(writer, "pitfall", "The deploy script needs bash 5.")
    await hub.knowledge.confirm(await hub.accounts.authenticate(tokens.owner), entry.id)
    reporter = await hub.accounts.authenticate(tokens.other_writer)
    _, effect = await hub.knowledge.post_event(reporter, "error", {"contradicts": entry.id, "message": "bash 4 works"})
    assert effect == "contradicted"
    return tokens.owner, entry.id, hub.clock.now()


async def test_a_shorter_window_set_later_does_not_unblock_a_confirm(hub: Hub, clock: ManualClock) -> None:
    owner_token, entry_id, recorded = await contradicted_entry(hub, window_days=30)
    clock.advance(5 * DAY)
    owner = await hub.accounts.authenticate(owner_token)
    await hub.accounts.update_settings(owner, {"window_days": 1})
    owner = await hub.accounts.authenticate(owner_token)  # the project as it is now
    assert owner.project.settings.window_days == 1

    with pytest.raises(Conflict) as refused:
        await hub.knowledge.confirm(owner, entry_id)
    assert refused.value.code == "blocked_by_contradiction"
    assert refused.value.extra["blocked_until"] == to_rfc3339(recorded + 30 * DAY)
    assert (await hub.knowledge.get(owner, entry_id)).state == "contradicted"


async def test_a_longer_window_set_later_does_not_extend_a_block(hub: Hub, clock: ManualClock) -> None:
    owner_token, entry_id, _ = await contradicted_entry(hub, window_days=1)
    clock.advance(2 * DAY)
    owner = await hub.accounts.authenticate(owner_token)
    await hub.accounts.update_settings(owner, {"window_days": 30})
    owner = await hub.accounts.authenticate(owner_token)

    confirmed = await hub.knowledge.confirm(owner, entry_id)
    assert confirmed.state == "trusted"
