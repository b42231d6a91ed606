"""Thread messages and the budget counted over them."""

from __future__ import annotations

from gateway.store.queries.common import QueryBase


class ThreadQueries(QueryBase):
    async def insert_thread_message(
        self, message_id: str, project_id: int, thread_id: str, author: str, text: str, posted_by: str, now: float
    ) -> None:
        await self.tx.run(
            "INSERT INTO thread_messages (id, project_id, thread_id, author, text, posted_by, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            message_id,
            project_id,
            thread_id,
            author,
            text,
            posted_by,
            now,
        )

    async def count_thread_messages_since(
        self, project_id: int, principal: str, since: float, *, lock: bool = True
    ) -> tuple[int, float | None]:
        return await self._count_since(
            f"budget:messages:{project_id}:{principal}" if lock else None,
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM thread_messages WHERE project_id = ? AND posted_by = ? AND at > ?",
            project_id,
            principal,
            since,
        )
