"""Projects, their settings, and the tokens that name who is calling."""

from __future__ import annotations

import math
import re
from typing import Any

from gateway.accounts import tokens
from gateway.knowledge import trust
from gateway.core.clock import Clock
from gateway.core.errors import Conflict, Invalid, NotFound, Unauthorized
from gateway.knowledge.permissions import require
from gateway.knowledge.model import LEVELS, Principal, Project, ProjectSettings
from gateway.store.base import Driver
from gateway.store.queries import Queries, _project

SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$")

DEFAULT_PLAYBOOK = """# RELAYROOM.md

This project keeps its durable knowledge (facts, conventions, pitfalls and
decisions) in the RelayRoom Knowledge Gateway.

- Before non-trivial work, call `recall` with what you are about to do.
- When you learn something worth keeping, call `learn`: it is stored as a
  candidate and reaches other agents only after CI or an owner confirms it.
- If a recalled entry turns out wrong, call `report_error` with its id.
- If a recalled entry shaped your work, call `recall_used`.
"""

# The ranges of the settings (docs/security.md, Limits).  Every bound is finite: a window of 1e7 days put a
# contradiction's `until` in the year 29405, which no date type can print.
SETTING_RULES: dict[str, tuple[type, float, float, str]] = {
    # name: (type, minimum, maximum, what a person is told)
    "k_distinct_issuers": (int, 1, 100, "an integer from 1 to 100"),
    "window_days": (float, 0, 3650, "a number of days above 0 and at most 3650"),
    "playbook_min_trusted": (int, 0, 1_000_000, "an integer from 0 to 1000000"),
    "playbook_top_n": (int, 1, 100, "an integer from 1 to 100"),
    "demotions_per_hour": (int, 1, 1_000_000, "an integer from 1 to 1000000"),
}


def setting_ok(name: str, value: Any) -> bool:
    """Whether `value` (as JSON decoded it) is in the contract's range for `name`."""
    kind, minimum, maximum, _ = SETTING_RULES[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False  # true is not 1, "2" is not 2
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if kind is int and isinstance(value, float) and not value.is_integer():
        return False
    if name == "window_days":
        return minimum < value <= maximum
    return minimum <= value <= maximum


def default_settings() -> ProjectSettings:
    return ProjectSettings(
        k_distinct_issuers=trust.DEFAULT_K,
        window_days=trust.DEFAULT_WINDOW_DAYS,
        playbook_min_trusted=trust.DEFAULT_PLAYBOOK_MIN_TRUSTED,
        playbook_top_n=trust.DEFAULT_PLAYBOOK_TOP_N,
        demotions_per_hour=trust.DEFAULT_DEMOTIONS_PER_HOUR,
    )


def validate_settings(current: ProjectSettings, changes: dict[str, Any]) -> ProjectSettings:
    values = current.to_json()
    for name, value in changes.items():
        if name not in SETTING_RULES:
            raise Invalid(f"unknown setting {name!r}", code="unknown_field")
        kind, _, _, wanted = SETTING_RULES[name]
        if not setting_ok(name, value):
            raise Invalid(f"{name} must be {wanted}", code="invalid_setting")
        values[name] = kind(value)
    return ProjectSettings(**values)


class Accounts:
    def __init__(self, driver: Driver, clock: Clock) -> None:
        self.driver = driver
        self.clock = clock

    async def create_project(self, slug: str, *, k: int | None = None, window_days: float | None = None) -> Project:
        if not isinstance(slug, str) or not SLUG.match(slug):
            raise Invalid("project slug must match ^[a-z0-9][a-z0-9-]{0,62}$", code="invalid_slug")
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
        if level not in LEVELS:
            raise Invalid(f"level must be one of {', '.join(LEVELS)}", code="invalid_level")
        if not isinstance(name, str) or not PRINCIPAL.match(name):
            raise Invalid(
                "principal name must be 1-128 characters of letters, digits and . _ @ : -", code="invalid_principal"
            )
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

    async def authenticate(self, secret: str) -> Principal:
        """The principal behind a bearer token, or 401."""
        if not secret or len(secret) > tokens.MAX_TOKEN_CHARS:
            raise Unauthorized("the bearer token is not valid for this gateway", code="invalid_token")
        row = await self.driver.read(lambda q: q.token_by_hash(tokens.digest(secret)))
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
        return await self.driver.read(lambda q: q.playbook(principal.project.id))

    async def set_playbook(self, principal: Principal, text: str) -> None:
        require(principal, "edit_playbook")
        if len(text) > 60000 or "\x00" in text:
            raise Invalid("the playbook must be text under 60000 characters", code="invalid_field")
        now = self.clock.now()

        async def unit(q: Queries) -> None:
            await q.set_playbook(principal.project.id, text)
            await q.audit(principal.project.id, now, "settings", None, principal.name, {"changed": ["playbook"]})

        await self.driver.write(unit)

    async def secret_key(self) -> str:
        import secrets as _secrets

        candidate = _secrets.token_urlsafe(48)
        return await self.driver.write(lambda q: q.meta_set_if_absent("secret_key", candidate))

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
