"""The meta table (the store's own key/value facts) and row counts."""

from __future__ import annotations

from gateway.store.queries.common import QueryBase


class MetaQueries(QueryBase):
    async def meta_get(self, key: str) -> str | None:
        row = await self.tx.one("SELECT value FROM meta WHERE key = ?", key)
        return row["value"] if row else None

    async def meta_set_if_absent(self, key: str, value: str) -> str:
        await self.tx.run("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", key, value)
        stored = await self.meta_get(key)
        assert stored is not None
        return stored

    async def count_rows(self, table: str) -> int:
        assert table.isidentifier()
        row = await self.tx.one(f"SELECT COUNT(*) AS n FROM {table}")
        return int(row["n"]) if row else 0
