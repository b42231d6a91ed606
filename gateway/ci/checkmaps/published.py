"""The check maps in force that projects' repositories published, as this
process holds them.

The store is where every gateway process finds them: each process polls
one cheap value, the generation (`Queries.checkmap_generation`, rewritten
by every change of a published map in force), and reads the maps again
only when it moved, so a publication is in force everywhere within a poll.
A map is validated again as it is read (the text is what the repository
holds; the gateway that reads it may be newer than the one that took it):
one that no longer validates is reported and gives no binding, and still
holds its project, so that a file of the folder never takes its place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gateway.ci.checkmaps.model import CheckMap, Problem
from gateway.ci.checkmaps.validate import validate_text
from gateway.core.clock import Clock, to_rfc3339
from gateway.store.base import Driver
from gateway.store.queries.checkmaps import PublishedRow
from gateway.store.queries import Queries

log = logging.getLogger("relayroom.checkmaps")


@dataclass
class PublishedMap:
    project: str
    source: str  # the file's path in the repository
    sha256: str
    run: dict[str, Any]
    published_at: float
    loaded_at: float
    checkmap: CheckMap | None  # None: its text no longer validates (`problems` say why)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def label(self) -> str:
        """How problems name it."""
        commit = str(self.run.get("commit") or "")[:12]
        return f"the map {self.project}'s repository published ({self.source}{f' at {commit}' if commit else ''})"

    def holding(self) -> CheckMap:
        """The map as it holds its project against the folder's files: itself,
        or, when it no longer validates, a map that binds nothing."""
        return self.checkmap or CheckMap(project=self.project, file=self.source, sha256=self.sha256, bindings=())

    def status(self) -> dict[str, Any]:
        """Its row on /readyz."""
        error = "; ".join(str(p) for p in self.problems) or None
        return {"project": self.project, "source": "published", "path": self.source,
                "sha256": self.sha256 if self.checkmap else None, "loaded_at": to_rfc3339(self.loaded_at),
                "error": error, "warnings": [str(w) for w in self.warnings]}


class PublishedMaps:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.maps: dict[str, PublishedMap] = {}  # by project
        self.generation: str | None = None

    async def load(self, driver: Driver) -> bool:
        """Read the maps again if the generation moved; True when what is in force changed."""
        async def unit(q: Queries) -> tuple[str, list[PublishedRow] | None]:
            generation: str = await q.checkmap_generation()
            # Read after the generation, in one snapshot: a change committed
            # between the two is seen at the next poll, never missed.
            return generation, None if generation == self.generation else await q.published_in_force()

        generation, rows = await driver.read(unit)
        if rows is None:
            return False
        self.generation = generation
        return self.apply(rows)

    def apply(self, rows: list[PublishedRow]) -> bool:
        now = self.clock.now()
        maps: dict[str, PublishedMap] = {}
        for row in rows:
            known = self.maps.get(row.project)
            if known is not None and known.sha256 == row.sha256:
                maps[row.project] = known
                continue
            checkmap, problems = validate_text(row.content, row.source)
            if checkmap is not None and checkmap.project != row.project:
                problems = [Problem(row.source, checkmap.project_line, f"maps project {checkmap.project}, not {row.project}")]
                checkmap = None
            for problem in problems:
                log.error("the check map published for %s no longer validates: %s", row.project, problem)
            maps[row.project] = PublishedMap(row.project, row.source, row.sha256, row.run, row.published_at, now,
                                             checkmap, problems)
            log.info("check map of %s published by its repository is in force: %s (sha256 %s)", row.project,
                     row.source, row.sha256)
        changed = {p: m.sha256 for p, m in maps.items()} != {p: m.sha256 for p, m in self.maps.items()}
        self.maps = maps
        return changed

    def in_force(self) -> list[CheckMap]:
        return [m.checkmap for _, m in sorted(self.maps.items()) if m.checkmap is not None]

    def status(self) -> list[dict[str, Any]]:
        return [m.status() for _, m in sorted(self.maps.items())]
