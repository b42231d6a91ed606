"""The composition root: one store, one clock, and every service built on
them, once, here.

Every door (REST, MCP, dashboard, CLI, tests) is handed one `Hub` and reads
its services as typed attributes; no route module or door wires a service of
its own.  A test builds a hub with a `ManualClock` and a temp database and
drives it through any door.

`start(serve=True)` also runs what only a serving gateway needs: the check
maps loaded against the store, watched for changes and reloaded on SIGHUP.
The CLI's short-lived hubs start without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Coroutine

from gateway.accounts.service import Accounts
from gateway.accounts.sessions import Sessions
from gateway.ci import replay
from gateway.ci.checkmaps.registry import CheckmapRegistry
from gateway.ci.intake import AttestationIntake
from gateway.ci.oidc.fetch import JsonFetcher
from gateway.ci.oidc.keys import KeyCache
from gateway.ci.oidc.verifier import TokenVerifier
from gateway.ci.providers.github_webhook import GitHubWebhooks
from gateway.ci.publish import CheckmapPublications
from gateway.core.clock import Clock, SystemClock
from gateway.core.config import Config
from gateway.knowledge.ledger import Ledger
from gateway.knowledge.proposals import Proposals
from gateway.knowledge.service import Knowledge, WriteLimits
from gateway.knowledge.threads import Threads
from gateway.core.metrics import Metrics
from gateway.recall import semantic
from gateway.recall.service import Recall
from gateway.store import open_driver
from gateway.store.base import Driver

log = logging.getLogger("relayroom")


class Hub:
    def __init__(self, config: Config, *, clock: Clock | None = None, driver: Driver | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.driver: Driver = driver or open_driver(config.database_url)
        self.metrics = Metrics()
        self.accounts = Accounts(self.driver, self.clock)
        self.sessions = Sessions(self.driver, self.clock, config)
        self.knowledge = Knowledge(
            self.driver,
            self.clock,
            self.metrics,
            WriteLimits(config.learn_per_hour, config.events_per_hour, config.recalls_per_hour),
        )
        # Recall reads the knowledge service's budgets per call, so that one
        # object holds every budget (a test may swap it).  Its semantic stage
        # is decided here, once, from the settings: on for every door or none.
        stage, status = semantic.load(config.semantic_model, config.semantic_model_sha256, self.driver, config.semantic_pair)
        if stage is not None or (config.semantic_model or "").lower() != "off":
            (log.info if stage is not None else log.warning)("recall: %s", status.detail)
        self.recall = Recall(self.driver, self.clock, self.metrics, lambda: self.knowledge.limits, stage, status)
        self.proposals = Proposals(self.driver, self.clock, lambda: self.knowledge.limits)
        self.threads = Threads(self.driver, self.clock, self.knowledge)
        self.ledger = Ledger(self.driver, self.clock)
        # The CI side: check maps, the issuers' keys, token verification, the intake.
        self.checkmaps = CheckmapRegistry(config.checkmaps, self.clock)
        self.fetcher = JsonFetcher(allow_insecure=config.allow_insecure_issuers)
        self.keys = KeyCache(clock=self.clock, driver=self.driver, fetcher=self.fetcher, metrics=self.metrics)
        self.verifier = TokenVerifier(
            keys=self.keys,
            snapshot=lambda: self.checkmaps.snapshot,
            clock=self.clock,
            audience=config.audience,
            allow_insecure=config.allow_insecure_issuers,
        )
        self.intake = AttestationIntake(
            config=config, clock=self.clock, driver=self.driver, knowledge=self.knowledge, metrics=self.metrics,
            registry=self.checkmaps, verifier=self.verifier,
        )
        self.github_webhooks = GitHubWebhooks(self.intake)
        self.publications = CheckmapPublications(clock=self.clock, driver=self.driver, registry=self.checkmaps,
                                                 verifier=self.verifier)
        self._serving = False
        self._tasks: list[asyncio.Task[Any]] = []
        self.started = False
        self.loop: asyncio.AbstractEventLoop | None = None

    async def start(self, *, background: bool = True, serve: bool = False) -> None:
        self.loop = asyncio.get_running_loop()
        await self.driver.open()
        if serve:
            await self.checkmaps.refresh(self.driver)  # the folder and the published maps
            self.checkmaps.install_sighup(self.driver)
            self.add_task(self.checkmaps.watch(self.driver), "relayroom-checkmaps")
            self._serving = True
        if background and self.recall.semantic is not None:
            # Vectors of entries trusted since the last look, embedded off the loop.
            self.add_task(self.recall.semantic.fill_loop(self.driver), "relayroom-recall-vectors")
        if background and self.config.sweep_interval > 0:
            self._tasks.append(asyncio.create_task(self._sweep_loop(), name="relayroom-sweep"))
        self.started = True

    async def stop(self) -> None:
        if self.recall.semantic is not None:
            self.recall.semantic.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._serving:
            self.checkmaps.remove_sighup()
            self._serving = False
        with contextlib.suppress(Exception):
            await self.fetcher.close()
        await self.driver.close()
        self.started = False

    def add_task(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def sweep(self) -> int:
        """One round of housekeeping: retire expired entries, then forget the
        CI replay records that can no longer matter.  Returns how many entries
        were retired.  Two services, one round: knowledge may not import the
        CI side whose tolerance decides the pruning."""
        retired = await self.knowledge.sweep()
        await replay.prune(self.driver, self.clock.now())
        return retired

    async def _sweep_loop(self) -> None:
        while True:
            try:
                retired = await self.sweep()
                if retired:
                    log.info("sweep retired %d expired entries", retired)
            except Exception:  # the sweep retries next round; recall already hides expired entries
                log.exception("sweep failed")
            await asyncio.sleep(self.config.sweep_interval)
