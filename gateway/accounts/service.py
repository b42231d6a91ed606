"""Projects, their settings, and the tokens that name who is calling."""

from __future__ import annotations

from typing import Any

from gateway.accounts import tokens
from gateway.core.clock import Clock
from gateway.core.errors import Conflict, Invalid, NotFound, Unauthorized
from gateway.core.visible import marked
from gateway.knowledge.inputs import refuse_invisible
from gateway.knowledge.permissions import require
from gateway.knowledge.model import LEVELS, Principal, Project, ProjectSettings
from gateway.knowledge.settings import PRINCIPAL, PRINCIPAL_RULE, SLUG, SLUG_RULE, default_settings, validate_settings
from gateway.store.base import Driver
from gateway.store.queries import Queries, _project

MAX_PLAYBOOK = 60000

DEFAULT_PLAYBOOK = """# RELAYROOM.md

This project keeps its durable knowledge (facts, conventions, pitfalls and
decisions) in the RelayRoom Knowledge Gateway.

- Before non-trivial work, call `recall` with what you are about to do.
- When you learn something worth keeping, call `learn`: it is stored as a
  candidate and reaches other agents only after CI or an owner confirms it.
- If a recalled entry turns out wrong, call `report_error` with its id.
- If a recalled entry shaped your work, call `recall_used`.
"""



def check_token_request(level: object, name: object) -> None:
    if level not in LEVELS:
        raise Invalid(f"level must be one of {', '.join(LEVELS)}", code="invalid_level")
    if not isinstance(name, str) or not PRINCIPAL.fullmatch(name):
        raise Invalid(f"principal name must be {PRINCIPAL_RULE}", code="invalid_principal")


class Accounts:
    def __init__(self, driver: Driver, clock: Clock) -> None:
        self.driver = driver
        self.clock = clock

    async def create_project(self, slug: str, *, k: int | None = None, window_days: float | None = None) -> Project:
        if not isinstance(slug, str) or not SLUG.fullmatch(slug):
            raise Invalid(f"project slug must be {SLUG_RULE}", code="invalid_slug")
        changes: dict[str, Any] = {}
        if k is not None:
            changes["k_distinct_issuers"] = k
        if window_days is not None:
            changes["window_days"] = window_days
        settings = validate_settings(default_settings(), changes)
        now = self.clock.now()

        async def unit(q: Queries) -> Project:
            if await q.project_by_slug(slug) is not None:
                raise Conflict(f"project {slug!r} already exists", code="project_exists")
            return await q.insert_project(slug, settings, now, DEFAULT_PLAYBOOK)

        return await self.driver.write(unit)

    async def project(self, slug: str) -> Project:
        project = await self.driver.read(lambda q: q.project_by_slug(slug))
        if project is None:
            raise NotFound(f"no project {slug!r}", code="project_not_found")
        return project

    async def projects(self) -> list[Project]:
        return await self.driver.read(lambda q: q.projects())

    async def create_token(self, slug: str, level: str, name: str) -> str:
        check_token_request(level, name)
        secret = tokens.generate()
        now = self.clock.now()

        async def unit(q: Queries) -> None:
            project = await q.project_by_slug(slug)
            if project is None:
                raise NotFound(f"no project {slug!r}", code="project_not_found")
            await q.insert_token(project.id, name, level, tokens.digest(secret), now)

        await self.driver.write(unit)
        return secret

    async def revoke_tokens(self, slug: str, name: str) -> int:
        now = self.clock.now()

        async def unit(q: Queries) -> int:
            project = await q.project_by_slug(slug)
            if project is None:
                raise NotFound(f"no project {slug!r}", code="project_not_found")
            return await q.revoke_tokens(project.id, name, now)

        return await self.driver.write(unit)

    # -- the owner's view of the project's tokens (the dashboard's Tokens page) --

    async def project_tokens(self, principal: Principal, current_hash: str = "") -> list[dict[str, Any]]:
        """Every token of the owner's project, newest first: id, principal,
        level, created_at, revoked_at, and is_current (its hash is
        `current_hash`, e.g. the one a dashboard session signed in with).
        Never a secret or its hash."""
        require(principal, "manage_tokens")
        return await self.driver.read(lambda q: q.project_tokens(principal.project.id, current_hash))

    async def issue_token(self, principal: Principal, level: str, name: str) -> str:
        """An owner creates a token of its own project; the secret is returned
        once and only its hash is kept.  Audited as `settings`."""
        require(principal, "manage_tokens")
        check_token_request(level, name)
        secret = tokens.generate()
        now = self.clock.now()
        project_id = principal.project.id

        async def unit(q: Queries) -> None:
            await q.insert_token(project_id, name, level, tokens.digest(secret), now)
            await q.audit(project_id, now, "settings", None, principal.name,
                          {"token_created": {"principal": name, "level": level}})

        await self.driver.write(unit)
        return secret

    async def revoke_token(self, principal: Principal, token_id: int) -> dict[str, Any]:
        """An owner revokes one token of its own project (404 for any other
        id, revoked or not, so ids of other projects cannot be probed).
        Audited as `settings`; a session signed in with it ends at once."""
        require(principal, "manage_tokens")
        now = self.clock.now()
        project_id = principal.project.id

        async def unit(q: Queries) -> dict[str, Any]:
            rows = {int(r["id"]): r for r in await q.project_tokens(project_id)}
            row = rows.get(token_id)
            if row is None or not await q.revoke_token(project_id, token_id, now):
                raise NotFound(f"no active token {token_id} in project {principal.project.slug}", code="token_not_found")
            await q.audit(project_id, now, "settings", None, principal.name,
                          {"token_revoked": {"principal": row["principal"], "level": row["level"]}})
            return row

        return await self.driver.write(unit)

    async def authenticate(self, secret: str) -> Principal:
        """The principal behind a bearer token, or 401."""
        if not secret or len(secret) > tokens.MAX_TOKEN_CHARS:
            raise Unauthorized("the bearer token is not valid for this gateway", code="invalid_token")
        unexpanded = tokens.placeholder_message(secret)
        if unexpanded is not None:
            raise Unauthorized(unexpanded, code="invalid_token")
        row = await self.driver.read_statement(lambda q: q.token_by_hash(tokens.digest(secret)))
        if row is None or row["revoked_at"] is not None or not tokens.matches(secret, row["token_hash"]):
            raise Unauthorized("the bearer token is not valid for this gateway (unknown or revoked)", code="invalid_token")
        return Principal(project=_project(row), name=row["principal"], level=row["level"])

    async def settings(self, principal: Principal) -> ProjectSettings:
        require(principal, "read_settings")
        return principal.project.settings  # read with the token, in this very request

    async def update_settings(self, principal: Principal, changes: dict[str, Any]) -> ProjectSettings:
        require(principal, "change_settings")
        if not isinstance(changes, dict) or not changes:
            raise Invalid("send at least one setting to change", code="invalid_field")
        now = self.clock.now()
        project_id = principal.project.id

        async def unit(q: Queries) -> ProjectSettings:
            # Locked: two owners changing different settings at once on two
            # processes must not each write back the other's old value.
            project = await q.project_by_id(project_id, for_update=True)
            assert project is not None
            updated = validate_settings(project.settings, changes)
            await q.update_settings(project_id, updated)
            await q.audit(project_id, now, "settings", None, principal.name, {"changed": changes})
            return updated

        return await self.driver.write(unit)

    async def playbook(self, principal: Principal) -> str:
        # Marked as RELAYROOM.md serves it (gateway.knowledge.playbook).
        return marked(await self.driver.read(lambda q: q.playbook(principal.project.id)))

    async def set_playbook(self, principal: Principal, text: str) -> None:
        require(principal, "edit_playbook")
        if len(text) > MAX_PLAYBOOK:
            raise Invalid(f"the playbook must be text under {MAX_PLAYBOOK} characters", code="invalid_field")
        refuse_invisible(text, "the playbook")
        now = self.clock.now()

        async def unit(q: Queries) -> None:
            await q.set_playbook(principal.project.id, text)
            await q.audit(principal.project.id, now, "settings", None, principal.name, {"changed": ["playbook"]})

        await self.driver.write(unit)

    async def project_principal(self, slug: str, name: str, level: str) -> Principal:
        """Rebuild a principal whose token was verified earlier in this request."""
        return Principal(project=await self.project(slug), name=name, level=level)

    async def tokens(self, slug: str) -> list[dict[str, Any]]:
        """Every token of a project for the administrator's command line,
        oldest first: project, principal, level, created_at, revoked_at; never
        the secret nor its hash.  (Whoever can open the store administers it:
        no principal is asked for, as for `create_token`.)"""

        async def unit(q: Queries) -> list[dict[str, Any]]:
            project = await q.project_by_slug(slug)
            if project is None:
                raise NotFound(f"no project {slug!r}", code="project_not_found")
            rows = await q.project_tokens(project.id)
            keep = ("principal", "level", "created_at", "revoked_at")
            return [{"project": slug, **{key: row[key] for key in keep}} for row in reversed(rows)]

        return await self.driver.read(unit)
