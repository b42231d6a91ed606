"""The hub: one store, one clock, and the services built on them.

Everything a door (REST, MCP, dashboard, CLI) needs hangs off one `Hub`, so a
test builds a hub with a `ManualClock` and a temp database and drives it
through any door.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from gateway.accounts.service import Accounts
from gateway.core.clock import Clock, SystemClock
from gateway.core.config import Config
from gateway.knowledge.service import Knowledge, WriteLimits
from gateway.core.metrics import Metrics
from gateway.recall.service import Recall
from gateway.store import open_driver
from gateway.store.base import Driver

log = logging.getLogger("relayroom")


class Hub:
    def __init__(self, config: Config, *, clock: Clock | None = None, driver: Driver | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.driver: Driver = driver or open_driver(config.database_url)
        self.accounts = Accounts(self.driver, self.clock)
        self.knowledge = Knowledge(
            self.driver,
            self.clock,
            WriteLimits(config.learn_per_hour, config.events_per_hour, config.recalls_per_hour),
        )
        # Recall reads the knowledge service's budgets per call, so that one
        # object holds every budget (a test may swap it).
        self.recall = Recall(self.driver, self.clock, lambda: self.knowledge.limits)
        self.metrics = Metrics()
        self.knowledge.metrics = self.recall.metrics = self.metrics
        self.extensions: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self.started = False
        self.loop: asyncio.AbstractEventLoop | None = None

    async def start(self, *, background: bool = True) -> None:
        self.loop = asyncio.get_running_loop()
        await self.driver.open()
        for hook in list(self.extensions.get("on_start", [])):
            await hook(self)
        if background and self.config.sweep_interval > 0:
            self._tasks.append(asyncio.create_task(self._sweep_loop(), name="relayroom-sweep"))
        self.started = True

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for hook in list(self.extensions.get("on_stop", [])):
            with contextlib.suppress(Exception):
                await hook(self)
        await self.driver.close()
        self.started = False

    def add_task(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def _sweep_loop(self) -> None:
        while True:
            try:
                retired = await self.knowledge.sweep()
                if retired:
                    log.info("sweep retired %d expired entries", retired)
            except Exception:  # the sweep retries next round; recall already hides expired entries
                log.exception("sweep failed")
            await asyncio.sleep(self.config.sweep_interval)
