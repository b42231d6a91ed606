"""Dashboard sessions: a signed-in browser, tied to the token it signed in with."""

from __future__ import annotations

from typing import Any

from gateway.store.queries.common import QueryBase


class SessionQueries(QueryBase):
    async def insert_session(self, session_hash: str, token_hash: str, now: float, expires_at: float) -> None:
        # Sessions long over are dropped here, on sign-in, rather than by a sweeper.
        await self.tx.run("DELETE FROM dashboard_sessions WHERE expires_at < ?", now)
        await self.tx.run(
            "INSERT INTO dashboard_sessions (session_hash, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?)",
            session_hash,
            token_hash,
            now,
            expires_at,
        )

    async def session_by_hash(self, session_hash: str) -> dict[str, Any] | None:
        """A session with the token and project it belongs to: one indexed look-up per page."""
        return await self.tx.one(
            "SELECT s.created_at AS session_created_at, s.expires_at AS session_expires_at, "
            "s.ended_at AS session_ended_at, t.principal, t.level, t.token_hash, t.revoked_at, p.* "
            "FROM dashboard_sessions s JOIN tokens t ON t.token_hash = s.token_hash "
            "JOIN projects p ON p.id = t.project_id WHERE s.session_hash = ?",
            session_hash,
        )

    async def end_session(self, session_hash: str, now: float) -> int:
        return await self.tx.run(
            "UPDATE dashboard_sessions SET ended_at = ? WHERE session_hash = ? AND ended_at IS NULL", now, session_hash
        )
