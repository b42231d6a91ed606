"""The check maps in force: loaded from a folder, reloaded when a file
changes or on SIGHUP, and looked up by the attestation intake.

Only the folder's top-level `*.yaml`/`*.yml` files are loaded (sub-folders
such as `examples/` are not).  A file that fails validation is reported and
the last good version of that file stays in force.  Files must not collide
(one file per project, one binding per secret variable, no issuer bound both
by ids and by sub): the file in force stays in force and a colliding
newcomer is reported and not loaded (`gateway.ci.checkmaps.conflicts`).  At most MAX_FILES files are loaded, the first by name:
the gateway keeps running with those and reports every file past the cap
(on /readyz and by `relayroom checkmap check`) as not loaded.  What the store knows (does the project exist, are the
supported ids entries of that project) is checked after each load and
reported as warnings; the intake never supports a foreign or unknown id
whatever the warnings say.

Beside the folder, the maps that projects' repositories published
(`published.PublishedMaps`, read from the store): once a project has one,
it is that project's map in force in every process, and a file of the
folder that clashes with it is reported and not loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, TypeVar

from gateway.ci.checkmaps.model import CheckMap, CheckRule, Problem
from gateway.ci.checkmaps.conflicts import resolve
from gateway.ci.checkmaps.published import PublishedMap, PublishedMaps
from gateway.ci.checkmaps.validate import allow_event_notes, validate_text
from gateway.ci.providers.base import Binding
from gateway.core.clock import Clock, to_rfc3339
from gateway.core.errors import NotFound
from gateway.store.queries import Queries

log = logging.getLogger("relayroom.checkmaps")

POLL_SECONDS = 1.0
# One file per project: a thousand projects is far past what one gateway
# serves, and bounds what a reload reads, hashes and validates (each file is
# at most 256 KiB).  Files past the cap are reported one by one, up to
# MAX_REPORTED_SKIPS of them, so the report is bounded too.
MAX_FILES = 1000
MAX_REPORTED_SKIPS = 100
RACY_NS = 3_000_000_000  # a file written in the last 3 s is re-read even when its stat looks unchanged


@dataclass
class _FileState:
    path: str
    disk_sha: str = ""
    # (mtime, ctime, size, inode) when last read: the poll reads and hashes
    # only files whose signature moved, so a full folder costs stat calls.
    disk_stat: tuple[int, int, int, int] | None = None
    parsed: CheckMap | None = None
    problems: list[Problem] = field(default_factory=list)
    conflicts: list[Problem] = field(default_factory=list)
    in_force: CheckMap | None = None
    loaded_at: float | None = None
    warnings: list[Problem] = field(default_factory=list)

    def error(self) -> str | None:
        return "; ".join(str(p) for p in self.problems + self.conflicts) or None


B = TypeVar("B", bound=Binding)


@dataclass(frozen=True)
class Snapshot:
    """Indexes over the maps in force, swapped whole on each reload."""

    maps: dict[str, CheckMap] = field(default_factory=dict)
    oidc: dict[str, tuple[Binding, ...]] = field(default_factory=dict)  # by the exact `iss` of their tokens
    # by the keys a door finds a binding by (`Binding.lookup_keys`): a GitHub
    # host and repository id, a webhook source
    lookup: dict[Hashable, tuple[Binding, ...]] = field(default_factory=dict)
    by_provider: dict[str, tuple[Binding, ...]] = field(default_factory=dict)

    @classmethod
    def build(cls, maps: list[CheckMap]) -> "Snapshot":
        oidc: dict[str, list[Binding]] = {}
        lookup: dict[Hashable, list[Binding]] = {}
        by_provider: dict[str, list[Binding]] = {}
        for checkmap in maps:
            for binding in checkmap.bindings:
                if binding.OIDC and binding.issuer:
                    oidc.setdefault(binding.issuer, []).append(binding)
                for key in binding.lookup_keys():
                    lookup.setdefault(key, []).append(binding)
                by_provider.setdefault(binding.NAME, []).append(binding)
        return cls(
            maps={m.project: m for m in maps},
            oidc={k: tuple(v) for k, v in oidc.items()},
            lookup={k: tuple(v) for k, v in lookup.items()},
            by_provider={k: tuple(v) for k, v in by_provider.items()},
        )

    def rule(self, project: str, check: str) -> CheckRule | None:
        checkmap = self.maps.get(project)
        return checkmap.checks.get(check) if checkmap is not None else None

    def bound(self, key: Hashable, provider: type[B]) -> list[B]:
        """The bindings of `provider` a door finds by `key`."""
        return [b for b in self.lookup.get(key, ()) if isinstance(b, provider)]

    def bindings_of(self, provider: type[B]) -> list[B]:
        return [b for b in self.by_provider.get(provider.NAME, ()) if isinstance(b, provider)]


@dataclass
class _Scan:
    """What one look at the folder found: files past the cap, files on disk,
    files whose bytes are as before (only their stat moved), and the files
    that changed, each with its validation."""

    skipped: list[str]
    total: int
    seen: set[str] = field(default_factory=set)
    unchanged: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    changed: dict[str, tuple[tuple[int, int, int, int], str, CheckMap | None, list[Problem]]] = field(default_factory=dict)


def no_project(project: str) -> NotFound:
    """A map binds a project this gateway does not have (both CI doors say it alike)."""
    return NotFound(f"the check maps bind project {project}, which does not exist on this gateway",
                    code="project_not_found")


class CheckmapRegistry:
    def __init__(self, folder: str | Path, clock: Clock, *, max_files: int | None = None) -> None:
        self.folder = Path(folder)
        self.clock = clock
        self.max_files = MAX_FILES if max_files is None else max_files
        self.snapshot = Snapshot()
        self.published = PublishedMaps(clock)
        self._files: dict[str, _FileState] = {}
        self._skipped: list[str] = []  # files past the cap, by name
        self._signal_installed = False
        self._refreshing = asyncio.Lock()

    # -- loading --------------------------------------------------------------

    def files(self) -> list[Path]:
        """Every check map file of the folder by name, past the cap or not."""
        try:
            with os.scandir(self.folder) as entries:
                found = [Path(e.path) for e in entries
                         if Path(e.name).suffix in (".yaml", ".yml") and not e.name.startswith(".") and e.is_file()]
        except OSError:  # no folder (yet), or not one
            return []
        return sorted(found)

    def reload(self) -> bool:
        """Read the folder; True when what is in force (or a reported problem) changed."""
        return self._apply(self._scan())

    def _scan(self) -> _Scan:
        """Stat the folder, read and validate what moved.  Reads `_files`
        and changes nothing, so it may run on a worker thread (a big map
        takes a noticeable time to validate) while requests are served."""
        paths = self.files()
        scan = _Scan(skipped=[str(p) for p in paths[self.max_files:]], total=len(paths))
        for path in paths[:self.max_files]:
            name = str(path)
            scan.seen.add(name)
            try:
                st = path.stat()
                signature = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
                known = self._files.get(name)
                # File times tick coarsely: two writes within one tick can
                # leave the same signature, so a recently written file is
                # read again until its time is safely in the past ("racy git").
                if known is not None and known.disk_stat == signature and time.time_ns() - st.st_mtime_ns > RACY_NS:
                    continue
                raw = path.read_bytes()
            except OSError as exc:
                log.warning("cannot read check map %s: %s", name, exc.strerror)
                continue
            digest = hashlib.sha256(raw).hexdigest()
            if known is not None and known.disk_sha == digest:
                scan.unchanged[name] = signature
                continue
            try:
                parsed, problems = validate_text(raw, name)
            except Exception:  # never let one file stop the gateway: report it, keep its last good version
                log.exception("check map %s could not be validated", name)
                parsed, problems = None, [Problem(name, 1, "the file could not be validated (see the log)")]
            scan.changed[name] = (signature, digest, parsed, problems)
        return scan

    def _apply(self, scan: _Scan) -> bool:
        changed = False
        if scan.skipped != self._skipped:
            changed = True
            self._skipped = scan.skipped
            if scan.skipped:
                log.warning("%d check map files in %s, over the cap of %d: the first %d by name are loaded, "
                            "%d are not (%s and after)", scan.total, self.folder, self.max_files, self.max_files,
                            len(scan.skipped), scan.skipped[0])
            else:
                log.info("every check map file of %s is within the cap of %d and loaded", self.folder, self.max_files)
        for name, signature in scan.unchanged.items():
            self._files.setdefault(name, _FileState(path=name)).disk_stat = signature
        for name, (signature, digest, parsed, problems) in scan.changed.items():
            state = self._files.setdefault(name, _FileState(path=name))
            state.disk_stat = signature
            if state.disk_sha == digest:
                continue
            changed = True
            state.disk_sha, state.parsed, state.problems = digest, parsed, problems
            for problem in problems:
                log.warning("check map problem: %s", problem)
        for name in list(self._files):
            if name not in scan.seen:
                if name in scan.skipped:
                    log.warning("check map %s is past the cap of %d files; its bindings are no longer in force",
                                name, self.max_files)
                else:
                    log.info("check map %s was removed; its bindings are no longer in force", name)
                del self._files[name]
                changed = True
        if changed:
            self._resolve()
        return changed

    def _resolve(self) -> None:
        """Decide which version of each file is in force (`conflicts.resolve`:
        the file in force stays, a colliding newcomer is the error)."""
        now = self.clock.now()
        fixed = {m.label: m.holding() for m in self.published.maps.values()}
        decisions = resolve({name: (state.in_force, state.parsed) for name, state in self._files.items()}, fixed)
        for name, decision in decisions.items():
            state = self._files[name]
            state.conflicts = list(decision.problems)
            for problem in state.conflicts:
                log.warning("check map problem: %s", problem)
            if decision.keep is None:
                state.in_force, state.loaded_at = None, None
            elif state.in_force is None or state.in_force.sha256 != decision.keep.sha256:
                state.in_force, state.loaded_at = decision.keep, now
                state.warnings = []
                for note in allow_event_notes(decision.keep):
                    log.info("check map %s", note)
        folder = [s.in_force for s in self._files.values() if s.in_force is not None]
        self.snapshot = Snapshot.build(folder + self.published.in_force())

    def notes(self) -> list[Problem]:
        """What the maps in force lift on purpose (allow_events): not problems, but worth a reviewer's eye."""
        return [note for name in sorted(self._files) if (m := self._files[name].in_force) is not None
                for note in allow_event_notes(m)]

    async def check_store(self, driver: Any) -> None:
        """Report maps naming a project this gateway lacks, and supported ids
        that are not entries of the map's project."""
        held: list[_FileState | PublishedMap] = [*self._files.values(), *self.published.maps.values()]
        maps = [(state, m) for state in held if (m := _in_force(state)) is not None]

        async def unit(q: Queries) -> list[list[Problem]]:
            return [await store_warnings(q, checkmap) for _, checkmap in maps]

        for (state, _), warnings in zip(maps, await driver.read(unit)):
            if [str(w) for w in warnings] != [str(w) for w in state.warnings]:
                for warning in warnings:
                    log.warning("check map problem: %s", warning)
            state.warnings = warnings

    def problems(self) -> list[Problem]:
        """Every problem of the files on disk (validation, conflicts, store warnings)."""
        out: list[Problem] = []
        for name in sorted(self._files):
            state = self._files[name]
            out.extend(state.problems)
            out.extend(state.conflicts)
            out.extend(state.warnings)
        out.extend(self._skip_problems())
        return out

    def _skip_problems(self) -> list[Problem]:
        """One problem per file past the cap, up to MAX_REPORTED_SKIPS; the
        last one shown counts the files after it."""
        if not self._skipped:
            return []
        total = self.max_files + len(self._skipped)
        message = (f"not loaded: over the cap of {self.max_files} check map files in one folder ({total} found; "
                   f"the first {self.max_files} by name are loaded); remove the maps of projects this gateway does not serve")
        shown = self._skipped[:MAX_REPORTED_SKIPS]
        out = [Problem(name, 1, message) for name in shown]
        rest = len(self._skipped) - len(shown)
        if rest:
            out[-1] = Problem(shown[-1], 1, f"{message}; nor are the {rest} files after this one by name")
        return out

    def status(self) -> list[dict[str, Any]]:
        rows = []
        for name in sorted(self._files):
            state = self._files[name]
            rows.append({
                "file": name,
                "source": "file",
                "sha256": state.in_force.sha256 if state.in_force else None,
                "loaded_at": to_rfc3339(state.loaded_at),
                "error": state.error(),
                "warnings": [str(w) for w in state.warnings],
            })
        for problem in self._skip_problems():
            rows.append({"file": problem.file, "sha256": None, "loaded_at": None, "error": str(problem), "warnings": []})
        return rows + self.published.status()

    def folder_maps(self) -> list[CheckMap]:
        """The folder's files in force."""
        return [s.in_force for _, s in sorted(self._files.items()) if s.in_force is not None]

    def folder_map(self, project: str) -> CheckMap | None:
        """The folder's file in force for `project`, if any."""
        return next((m for m in self.folder_maps() if m.project == project), None)

    # -- running inside the gateway ---------------------------------------------

    async def refresh(self, driver: Any) -> None:
        """Read the folder, and the published maps if their generation moved."""
        async with self._refreshing:  # the poll, SIGHUP and a publication take turns
            changed = self._apply(await asyncio.to_thread(self._scan))
            if await self.published.load(driver):
                self._resolve()
                changed = True
            if changed:
                await self.check_store(driver)

    async def refresh_published(self, driver: Any) -> None:
        """Read the published maps again, at once (a publication this process took)."""
        async with self._refreshing:
            if await self.published.load(driver):
                self._resolve()
                await self.check_store(driver)

    async def watch(self, driver: Any) -> None:
        """Poll the folder and the published maps' generation every second: a
        change is in force within 2 s."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self.refresh(driver)
            except Exception:  # the next round retries; the maps in force stay
                log.exception("check map reload failed")

    def install_sighup(self, driver: Any) -> None:
        loop = asyncio.get_running_loop()

        def on_hup() -> None:
            log.info("SIGHUP: reloading check maps")
            loop.create_task(self._forced_reload(driver))

        try:
            loop.add_signal_handler(signal.SIGHUP, on_hup)
            self._signal_installed = True
        except (ValueError, RuntimeError, NotImplementedError, AttributeError):
            pass  # not the main thread (tests, embedded servers): the poll still reloads

    def remove_sighup(self) -> None:
        if self._signal_installed:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._signal_installed = False

    async def _forced_reload(self, driver: Any) -> None:
        async with self._refreshing:
            for state in self._files.values():
                state.disk_sha, state.disk_stat = "", None  # re-read everything, even unchanged files
            self.published.generation = None
        await self.refresh(driver)


def _in_force(state: _FileState | PublishedMap) -> CheckMap | None:
    return state.in_force if isinstance(state, _FileState) else state.checkmap


async def store_warnings(q: Queries, checkmap: CheckMap) -> list[Problem]:
    """What the store says of a map: its project missing, supported ids that
    are not entries of its project (never supported, whatever the map says)."""
    warnings: list[Problem] = []
    project = await q.project_by_slug(checkmap.project)
    if project is None:
        warnings.append(Problem(checkmap.file, 1, f"project {checkmap.project} does not exist on this gateway; create "
                                f"it with `relayroom project create {checkmap.project}`"))
    ids = sorted({i for rule in checkmap.checks.values() for i in rule.supports})
    owners = await q.entry_projects(ids) if ids else {}
    for rule in checkmap.checks.values():
        for entry_id in rule.supports:
            owner = owners.get(entry_id)
            if owner is None:
                warnings.append(Problem(checkmap.file, rule.line, f"{rule.name}: {entry_id} is not an entry of project "
                                        f"{checkmap.project}; it will not be supported"))
            elif project is None or owner != project.id:
                warnings.append(Problem(checkmap.file, rule.line, f"{rule.name}: {entry_id} belongs to another project; "
                                        "it will never be supported from this map"))
    return warnings
