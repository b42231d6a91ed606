"""Forgetting the replay records of the CI doors once they can no longer matter.

The intake keeps every accepted token id (until the token's acceptance window
closes) and every Standard Webhooks message id, so that a delivery replayed
inside its window is refused.  A signed timestamp is accepted up to the
tolerance away in either direction, so a delivery stamped that far ahead of
our clock can be replayed, still fresh, until twice the tolerance after it
arrived; past that its id guards nothing (the replay is refused as stale)
and is dropped.  GitHub's run keys are never pruned: its deliveries carry
no signed timestamp.

The hub's sweep runs this next to the knowledge sweep.
"""

from __future__ import annotations

from gateway.ci.webhook_signatures import TOLERANCE_SECONDS
from gateway.store.base import Driver

WEBHOOK_ID_RETENTION_SECONDS = 2 * TOLERANCE_SECONDS


async def prune(driver: Driver, now: float) -> int:
    """Drop the replay records that can no longer be replayed; returns how many."""
    return await driver.write(lambda q: q.prune_replay_records(now, now - WEBHOOK_ID_RETENTION_SECONDS))
