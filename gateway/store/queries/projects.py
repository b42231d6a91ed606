"""Projects, their settings and playbook, and their tokens."""

from __future__ import annotations

from typing import Any

from gateway.knowledge.model import Project, ProjectSettings
from gateway.store.queries.common import QueryBase, _project


class ProjectQueries(QueryBase):
    async def project_by_slug(self, slug: str) -> Project | None:
        row = await self.tx.one("SELECT * FROM projects WHERE slug = ?", slug)
        return _project(row) if row else None

    async def project_by_id(self, project_id: int, *, for_update: bool = False) -> Project | None:
        sql = "SELECT * FROM projects WHERE id = ?"
        if for_update:
            sql += self.dialect.lock_rows()
        row = await self.tx.one(sql, project_id)
        return _project(row) if row else None

    async def projects(self) -> list[Project]:
        return [_project(r) for r in await self.tx.all("SELECT * FROM projects ORDER BY slug")]

    async def insert_project(self, slug: str, settings: ProjectSettings, now: float, playbook: str) -> Project:
        row = await self.tx.one(
            "INSERT INTO projects (slug, created_at, k_distinct_issuers, window_days, playbook_min_trusted, "
            "playbook_top_n, demotions_per_hour, playbook) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            slug,
            now,
            settings.k_distinct_issuers,
            settings.window_days,
            settings.playbook_min_trusted,
            settings.playbook_top_n,
            settings.demotions_per_hour,
            playbook,
        )
        assert row is not None
        project = _project(row)
        await self.tx.run("INSERT INTO recall_index (project_id) VALUES (?)", project.id)
        await self.index.create_project(project.id)
        return project

    async def update_settings(self, project_id: int, settings: ProjectSettings) -> None:
        await self.tx.run(
            "UPDATE projects SET k_distinct_issuers = ?, window_days = ?, playbook_min_trusted = ?, "
            "playbook_top_n = ?, demotions_per_hour = ? WHERE id = ?",
            settings.k_distinct_issuers,
            settings.window_days,
            settings.playbook_min_trusted,
            settings.playbook_top_n,
            settings.demotions_per_hour,
            project_id,
        )

    async def playbook(self, project_id: int) -> str:
        row = await self.tx.one("SELECT playbook FROM projects WHERE id = ?", project_id)
        return row["playbook"] if row else ""

    async def set_playbook(self, project_id: int, text: str) -> None:
        await self.tx.run("UPDATE projects SET playbook = ? WHERE id = ?", text, project_id)

    async def insert_token(self, project_id: int, principal: str, level: str, token_hash: str, now: float) -> None:
        await self.tx.run(
            "INSERT INTO tokens (project_id, principal, level, token_hash, created_at) VALUES (?, ?, ?, ?, ?)",
            project_id,
            principal,
            level,
            token_hash,
            now,
        )

    async def project_tokens(self, project_id: int, current_hash: str = "") -> list[dict[str, Any]]:
        """Every token of a project, never its hash: who, which level, when
        created and revoked, and whether it is the one whose hash is
        `current_hash` (the dashboard session's own).  Newest first."""
        rows = await self.tx.all(
            "SELECT id, principal, level, created_at, revoked_at, "
            "CASE WHEN token_hash = ? THEN 1 ELSE 0 END AS is_current FROM tokens WHERE project_id = ? ORDER BY id DESC",
            current_hash,
            project_id,
        )
        for row in rows:
            row["is_current"] = bool(row["is_current"])
        return rows

    async def revoke_token(self, project_id: int, token_id: int, now: float) -> int:
        """Revoke one token of the project (0 when unknown, of another project, or revoked already)."""
        return await self.tx.run(
            "UPDATE tokens SET revoked_at = ? WHERE project_id = ? AND id = ? AND revoked_at IS NULL",
            now,
            project_id,
            token_id,
        )

    async def token_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        return await self.tx.one(
            "SELECT t.principal, t.level, t.token_hash, t.revoked_at, p.* FROM tokens t "
            "JOIN projects p ON p.id = t.project_id WHERE t.token_hash = ?",
            token_hash,
        )

    async def revoke_tokens(self, project_id: int, principal: str, now: float) -> int:
        return await self.tx.run(
            "UPDATE tokens SET revoked_at = ? WHERE project_id = ? AND principal = ? AND revoked_at IS NULL",
            now,
            project_id,
            principal,
        )
