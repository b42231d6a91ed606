"""Check maps published by a project's repository (`POST /v1/checkmaps`),
and the owner's say over who may vote.

The repository's CI sends its map file as the repository holds it, with
the OIDC token of the run:

    verify the token: the verifier of attestations   -> 401/403 as 5.1; nothing spent
    validate the file as the folder's files are      -> 422 invalid_checkmap (FILE is the repository path)
    one write unit, one publication at a time:
      spend the token's jti (the attestations' store) -> 409 token_reused
      the map in force now: the store's, else this process's folder file
      the run may vote through it, for this project   -> 403 as 5.1 (it may have changed since)
      the map in force again                          -> 200 unchanged
      clashes with another project's map in force     -> 422 invalid_checkmap
      the same bindings, by meaning                   -> 200 applied: in force everywhere
      any binding added, removed or changed           -> 202 pending_owner, replacing a pending one

Who controls what: the body (project, path, text) is whatever the code
on a listed ref sends; the run's repository, ref, event and commit are the
issuer's signed claims.  Such a run votes anyway, so letting it change which
check speaks for which entry gives it nothing new; who may vote (the
bindings) changes only when the owner approves, naming the publication by
its sha256, and the approval judges it again against the maps in force
then.  A refusal writes nothing and spends nothing; every publication that
is applied, waits, is approved or rejected is an audit row (`checkmap`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any, Awaitable, Callable, Mapping

from gateway.ci.checkmaps.changes import BindingRow, CheckRow, binding_rows, binds_the_same, check_rows
from gateway.ci.checkmaps.conflicts import clash_text, collisions, publication_problem
from gateway.ci.checkmaps.model import CheckMap, Problem
from gateway.ci.checkmaps.registry import CheckmapRegistry, no_project
from gateway.ci.checkmaps.validate import validate_text
from gateway.ci.oidc.verifier import TokenVerifier
from gateway.core.clock import Clock, to_rfc3339
from gateway.core.errors import Conflict, Invalid
from gateway.core.jsonio import API_BODY_LIMIT
from gateway.core.visible import describe, first_invisible
from gateway.knowledge.model import Principal
from gateway.knowledge.permissions import require
from gateway.knowledge.settings import SLUG
from gateway.store.base import Driver
from gateway.store.queries.checkmaps import PublishedRow
from gateway.store.queries import Queries

log = logging.getLogger("relayroom.checkmaps")

LOCK = "checkmaps"  # every change of a published map, one at a time, across processes
MAX_PATH = 512
MAX_PROBLEMS = 100  # in one answer; the message counts them all

# What an owner's decision does to the rows: (queries, map in force, the pending map, now).
Move = Callable[[Queries, PublishedRow | None, PublishedRow, float], Awaitable[None]]


@dataclass(frozen=True)
class Publication:
    project: str
    path: str
    content: str


def read_publication(body: Mapping[str, Any]) -> Publication:
    """The body of `POST /v1/checkmaps`, or the refusal naming the field."""
    project, path, content = body.get("project"), body.get("path"), body.get("content")
    if not isinstance(project, str) or not SLUG.fullmatch(project):
        raise Invalid("project must be a project slug", code="invalid_field", extra={"field": "project"})
    if isinstance(path, str) and (found := first_invisible(path)) is not None:
        raise Invalid(f"path holds an invisible character ({describe(*found)}); it is shown to the owner",
                      code="invisible_text", extra={"field": "path"})
    if not isinstance(path, str) or not 1 <= len(path) <= MAX_PATH or not path.isprintable():
        raise Invalid(f"path must be the file's path in the repository, 1 to {MAX_PATH} printable characters",
                      code="invalid_field", extra={"field": "path"})
    if not isinstance(content, str):
        raise Invalid("content must be the check map file's text", code="invalid_field", extra={"field": "content"})
    return Publication(project, path, content)


def invalid(path: str, problems: list[Problem]) -> Invalid:
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return Invalid(f"the check map is not valid: {first}{more}; the map in force stays", code="invalid_checkmap",
                   extra={"problems": [{"line": p.line, "message": p.message} for p in problems[:MAX_PROBLEMS]]})


def read_map(text: bytes | str, path: str) -> tuple[CheckMap | None, list[Problem]]:
    """A map file as a publication is read (and `relayroom checkmap check FILE`
    reads it): validated as a file of the folder is, small enough to be
    published, and, since the owner reads it before approving, holding only
    characters a person can see."""
    checkmap, problems = validate_text(text, path)
    content = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    unpublishable = [Problem(path, number, f"{describe(*found)} cannot be seen for what it is; the owner reviews "
                             "this text, so it holds only what a person can see")
                     for number, line in enumerate(content.split("\n"), 1) if (found := first_invisible(line)) is not None]
    # A folder file may reach 256 KiB; published, it travels as a JSON string inside an API body, refused past
    # API_BODY_LIMIT before it is read: `checkmap check FILE` says so before the repository's CI finds out.
    if (size := len(json.dumps(content, ensure_ascii=False).encode())) > API_BODY_LIMIT:
        unpublishable.append(Problem(path, 1, f"as a JSON string this file is {size:,} bytes; a publication's body is "
                                     f"at most {API_BODY_LIMIT:,} bytes (64 KiB), so the gateway would answer 413 "
                                     "body_too_large"))
    if unpublishable:
        return None, sorted(unpublishable + problems, key=lambda p: p.line)
    return checkmap, problems


def validated(content: str, path: str, project: str) -> CheckMap:
    """The map as a publication reads it (`read_map`), or 422 invalid_checkmap."""
    checkmap, problems = read_map(content, path)
    if checkmap is not None and checkmap.project != project:
        problems.append(Problem(path, checkmap.project_line, f"this file maps project {checkmap.project}; it was "
                                f"published for project {project}"))
    if problems or checkmap is None:
        raise invalid(path, problems)
    return checkmap


@dataclass(frozen=True)
class Pending:
    sha256: str
    path: str
    content: str
    published_at: float
    run: dict[str, Any]
    bindings: list[BindingRow]  # beside the map in force
    checks: list[CheckRow]

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "path": self.path, "content": self.content,
                "published_at": to_rfc3339(self.published_at), "run": self.run}


@dataclass(frozen=True)
class CheckmapView:
    """The project's map in force, where it came from, and what waits for the owner."""

    source: str | None  # "published", "file", or None: no map in force
    path: str | None  # the repository path, or the folder's file name
    sha256: str | None
    content: str | None
    published_at: float | None
    run: dict[str, Any] | None
    pending: Pending | None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "sha256": self.sha256, "content": self.content,
                "published_at": to_rfc3339(self.published_at), "run": self.run,
                "pending": self.pending.to_json() if self.pending is not None else None}


class CheckmapPublications:
    def __init__(self, *, clock: Clock, driver: Driver, registry: CheckmapRegistry, verifier: TokenVerifier) -> None:
        self.clock = clock
        self.driver = driver
        self.registry = registry
        self.verifier = verifier

    # -- the repository's CI ------------------------------------------------------------

    async def publish(self, token: str, publication: Publication) -> tuple[int, dict[str, Any]]:
        project, path = publication.project, publication.path
        credential = await self.verifier.verify(token, project)
        checkmap = validated(publication.content, path, project)
        run = type(credential.binding).run_record(credential.claims, credential.issuer_url)
        now = self.clock.now()

        async def unit(q: Queries) -> tuple[int, dict[str, Any]]:
            await q.serialize(LOCK)
            stored = await _project(q, project)
            if not await q.reserve(credential.replay, now):
                raise Conflict("this token was already used; request a fresh token for each publication",
                               code="token_reused")
            in_force, pending = await _rows(q, stored.id)
            base = self._map_of(in_force) if in_force is not None else self.registry.folder_map(project)
            # Judged on the map in force now, which may have changed since the token was verified.
            self.verifier.select([b for b in (base.bindings if base else ()) if b.OIDC and b.issuer == credential.issuer_url],
                                 credential.claims, project)
            before = base.sha256 if base is not None else None
            record = {"source": path, "sha256_before": before, "sha256_after": checkmap.sha256, "run": run}
            if checkmap.sha256 == before:
                if pending is not None:  # the repository holds the map in force again: nothing waits
                    await q.set_published_state(pending.id, "replaced", now, credential.issuer)
                    await q.audit(stored.id, now, "checkmap", None, credential.issuer,
                                  {**record, "status": "unchanged", "withdrawn": pending.sha256})
                return 200, {"status": "unchanged", "sha256": checkmap.sha256}
            if pending is not None and pending.sha256 == checkmap.sha256:
                return 202, {"status": "pending_owner", "sha256": checkmap.sha256}  # already waiting as it is
            await self._refuse_clashes(q, checkmap, path)
            if pending is not None:
                await q.set_published_state(pending.id, "replaced", now, credential.issuer)
                record["replaced"] = pending.sha256
            if binds_the_same(base, checkmap):
                if in_force is not None:
                    await q.set_published_state(in_force.id, "superseded", now, credential.issuer)
                await q.insert_published(stored.id, path, publication.content, checkmap.sha256, "in_force", run, now)
                await q.new_checkmap_generation()
                await q.audit(stored.id, now, "checkmap", None, credential.issuer, {**record, "status": "applied"})
                return 200, {"status": "applied", "sha256": checkmap.sha256}
            await q.insert_published(stored.id, path, publication.content, checkmap.sha256, "pending", run, now)
            await q.audit(stored.id, now, "checkmap", None, credential.issuer, {**record, "status": "pending_owner"})
            return 202, {"status": "pending_owner", "sha256": checkmap.sha256}

        status, answer = await self.driver.write(unit)
        log.info("check map of %s published from %s (%s): %s", project, run.get("repository"), path, answer["status"])
        if answer["status"] == "applied":
            await self.registry.refresh_published(self.driver)  # in force here at once; elsewhere at the next poll
        return status, answer

    # -- the owner ----------------------------------------------------------------------

    async def view(self, principal: Principal) -> CheckmapView:
        require(principal, "read_checkmap")
        project = principal.project
        in_force, pending = await self.driver.read(lambda q: _rows(q, project.id))
        if in_force is not None:
            current = self._map_of(in_force)
            view = CheckmapView("published", in_force.source, in_force.sha256, in_force.content, in_force.published_at,
                                in_force.run, None)
        elif (current := self.registry.folder_map(project.slug)) is not None:
            view = CheckmapView("file", PurePath(current.file).name, current.sha256, current.content, None, None, None)
        else:
            view = CheckmapView(None, None, None, None, None, None, None)
        if pending is None:
            return view
        waiting, _ = validate_text(pending.content, pending.source)
        rows = binding_rows(current, waiting) if waiting is not None else []
        checks = check_rows(current, waiting) if waiting is not None else []
        return replace(view, pending=Pending(pending.sha256, pending.source, pending.content, pending.published_at,
                                             pending.run, rows, checks))

    async def approve(self, principal: Principal, sha256: str) -> CheckmapView:
        """Put the pending map in force, judged again against the maps in force now."""

        async def put_in_force(q: Queries, in_force: PublishedRow | None, pending: PublishedRow, now: float) -> None:
            checkmap = validated(pending.content, pending.source, principal.project.slug)
            await self._refuse_clashes(q, checkmap, pending.source)
            if in_force is not None:
                await q.set_published_state(in_force.id, "superseded", now, principal.name)
            await q.set_published_state(pending.id, "in_force", now, principal.name)
            await q.new_checkmap_generation()

        await self._decide(principal, sha256, "approved", put_in_force)
        await self.registry.refresh_published(self.driver)
        return await self.view(principal)

    async def reject(self, principal: Principal, sha256: str, reason: str | None = None) -> CheckmapView:
        async def set_aside(q: Queries, in_force: PublishedRow | None, pending: PublishedRow, now: float) -> None:
            await q.set_published_state(pending.id, "rejected", now, principal.name)

        await self._decide(principal, sha256, "rejected", set_aside, {"reason": reason} if reason else {})
        return await self.view(principal)

    async def _decide(self, principal: Principal, sha256: str, status: str, move: Move,
                      extra: Mapping[str, Any] | None = None) -> None:
        """The owner's decision on the pending map named by `sha256`, in one
        write unit holding LOCK: `move` changes its rows, and one audit row
        says what became of it."""
        require(principal, "review_checkmap")
        project = principal.project
        now = self.clock.now()

        async def unit(q: Queries) -> None:
            await q.serialize(LOCK)
            in_force, pending = await _rows(q, project.id)
            pending = _named(pending, sha256, project.slug)
            before = self._sha_in_force(in_force, project.slug)
            await move(q, in_force, pending, now)
            await q.audit(project.id, now, "checkmap", None, principal.name,
                          {"status": status, "source": pending.source, "sha256_before": before,
                           "sha256_after": pending.sha256, "run": pending.run, **(extra or {})})

        await self.driver.write(unit)

    # -- shared -------------------------------------------------------------------------

    def _map_of(self, row: PublishedRow) -> CheckMap | None:
        held = self.registry.published.maps.get(row.project)
        if held is not None and held.sha256 == row.sha256:
            return held.checkmap
        checkmap, _ = validate_text(row.content, row.source)
        return checkmap

    def _sha_in_force(self, in_force: PublishedRow | None, project: str) -> str | None:
        if in_force is not None:
            return in_force.sha256
        folder = self.registry.folder_map(project)
        return folder.sha256 if folder is not None else None

    async def _refuse_clashes(self, q: Queries, checkmap: CheckMap, path: str) -> None:
        """422 when `checkmap` clashes with another project's map in force: a
        published one (the store's, now), or a file of this process's folder."""
        staying: dict[str, CheckMap] = {}
        published = {row.project: row for row in await q.published_in_force() if row.project != checkmap.project}
        for row in published.values():
            other = self._map_of(row)
            if other is not None:
                staying[f"the map {row.project}'s repository published"] = other
        for other in self.registry.folder_maps():
            if other.project != checkmap.project and other.project not in published:
                staying[other.file] = other
        hits = collisions(checkmap, staying)
        if hits:
            for hit in hits:  # the whole story is the operator's
                log.info("check map published for %s refused: %s", checkmap.project, clash_text(hit, hit.other, reveal=True))
            raise invalid(path, [publication_problem(path, hit) for hit in hits])


async def _project(q: Queries, slug: str) -> Any:
    stored = await q.project_by_slug(slug)
    if stored is None:
        raise no_project(slug)
    return stored


async def _rows(q: Queries, project_id: int) -> tuple[PublishedRow | None, PublishedRow | None]:
    """The project's published map in force and its pending one.  A write unit
    reads them holding LOCK, so no other change comes between."""
    return await q.published_checkmap(project_id, "in_force"), await q.published_checkmap(project_id, "pending")


def _named(pending: PublishedRow | None, sha256: str, project: str) -> PublishedRow:
    if pending is None or pending.sha256 != sha256:
        waiting = f"the pending map is {pending.sha256}" if pending is not None else "nothing is pending"
        raise Conflict(f"no check map with sha256 {sha256[:64]} is pending for project {project} ({waiting}); a newer "
                       "publication replaces a pending one", code="not_pending")
    return pending
