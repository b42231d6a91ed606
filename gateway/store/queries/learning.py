"""What the playbook and the learning report read: use, recall and mention statistics
(rows as dicts; gateway.recall.learning and gateway.knowledge.playbook shape them)."""

from __future__ import annotations

from typing import Any

from gateway.knowledge.model import Entry
from gateway.store.queries.common import ENTRY_COLUMNS, STATE_FILTERS, QueryBase, _entry
from gateway.store.queries.recalls import RETURNED_SINCE_FOLD


class LearningQueries(QueryBase):
    async def count_trusted(self, project_id: int, now: float) -> int:
        row = await self.tx.one(
            f"SELECT COUNT(*) AS n FROM entries e WHERE e.project_id = ? AND {STATE_FILTERS['trusted']}",
            project_id,
            now,
        )
        return int(row["n"]) if row else 0

    async def most_used_trusted(self, project_id: int, now: float, limit: int) -> list[tuple[Entry, int]]:
        """Trusted, unexpired entries, most used first (ties: oldest first).

        "Used" counts (principal, UTC day) pairs, not calls: a principal
        reporting one entry used a hundred times in a day is one use, so
        repeating itself buys a token no rank (docs/security.md, Limits)."""
        day = self.dialect.utc_day("ru.at")
        rows = await self.tx.all(
            f"SELECT {ENTRY_COLUMNS}, COALESCE(u.n, 0) AS uses FROM entries e "
            "JOIN projects p ON p.id = e.project_id "
            "LEFT JOIN (SELECT entry_seq, COUNT(*) AS n FROM ("
            f"SELECT DISTINCT ru.entry_seq, r.principal, {day} AS day FROM recall_uses ru "
            "JOIN recalls r ON r.seq = ru.recall_seq WHERE ru.project_id = ?) d GROUP BY entry_seq) u "
            "ON u.entry_seq = e.seq "
            f"WHERE e.project_id = ? AND {STATE_FILTERS['trusted']} "
            "ORDER BY COALESCE(u.n, 0) DESC, e.seq ASC LIMIT ?",
            project_id,
            project_id,
            now,
            limit,
        )
        return [(_entry(r), int(r["uses"])) for r in rows]

    async def recall_days(self, project_id: int, since: float) -> list[dict[str, Any]]:
        """Per UTC day since `since`: recalls made and entries they returned."""
        day = self.dialect.utc_day("at")
        return await self.tx.all(
            f"SELECT {day} AS day, COUNT(*) AS recalls, CAST(COALESCE(SUM(returned), 0) AS BIGINT) AS returned "
            f"FROM recalls WHERE project_id = ? AND at >= ? GROUP BY {day} ORDER BY 1",
            project_id,
            since,
        )

    async def use_days(self, project_id: int, since: float) -> list[dict[str, Any]]:
        """Per UTC day of the recall: returned entries reported used."""
        day = self.dialect.utc_day("r.at")
        return await self.tx.all(
            f"SELECT {day} AS day, COUNT(*) AS used, COUNT(DISTINCT ru.recall_seq) AS recalls_with_use "
            "FROM recall_uses ru JOIN recalls r ON r.seq = ru.recall_seq "
            f"WHERE r.project_id = ? AND r.at >= ? GROUP BY {day} ORDER BY 1",
            project_id,
            since,
        )

    async def entry_recall_counts(self, project_id: int, since: float) -> dict[int, tuple[int, int]]:
        """entry seq -> (times returned, times used), over recalls made since `since`."""
        counts: dict[int, list[int]] = {}
        for i, table in enumerate(("recall_results", "recall_uses")):
            for row in await self.tx.all(
                f"SELECT t.entry_seq, COUNT(*) AS n FROM {table} t JOIN recalls r ON r.seq = t.recall_seq "
                "WHERE r.project_id = ? AND r.at >= ? GROUP BY t.entry_seq",
                project_id,
                since,
            ):
                counts.setdefault(int(row["entry_seq"]), [0, 0])[i] = int(row["n"])
        return {seq: (returned, used) for seq, (returned, used) in counts.items()}

    async def never_recalled(self, project_id: int, now: float, limit: int) -> tuple[int, list[Entry]]:
        """Trusted, unexpired entries no recall ever returned: (how many, the oldest few)."""
        # A counter row exists once a fold counted an entry, and the rows
        # since the last fold are few; without counters, the result rows are
        # found by the index on their entry.
        returned = (
            f"(EXISTS (SELECT 1 FROM recall_counts rc WHERE rc.entry_seq = e.seq) OR e.seq IN ({RETURNED_SINCE_FOLD}))"
            if self.dialect.recall_counters
            else "EXISTS (SELECT 1 FROM recall_results rr WHERE rr.entry_seq = e.seq)"
        )
        clause = f"e.project_id = ? AND {STATE_FILTERS['trusted']} AND NOT {returned}"
        row = await self.tx.one(f"SELECT COUNT(*) AS n FROM entries e WHERE {clause}", project_id, now)
        oldest = await self._entries(f"{clause} ORDER BY e.seq ASC LIMIT ?", project_id, now, limit)
        return (int(row["n"]) if row else 0), oldest

    async def entry_recall_stats(self, entry_seq: int) -> tuple[int, int]:
        """(times returned by a recall, times reported used) for one entry, ever."""
        returned = await (
            self.tx.one(
                "SELECT COALESCE((SELECT returned FROM recall_counts WHERE entry_seq = ?), 0) "
                f"+ (SELECT COUNT(*) FROM ({RETURNED_SINCE_FOLD}) WHERE entry_seq = ?) AS n",
                entry_seq,
                entry_seq,
            )
            if self.dialect.recall_counters
            else self.tx.one("SELECT COUNT(*) AS n FROM recall_results WHERE entry_seq = ?", entry_seq)
        )
        used = await self.tx.one("SELECT COUNT(*) AS n FROM recall_uses WHERE entry_seq = ?", entry_seq)
        return (int(returned["n"]) if returned else 0), (int(used["n"]) if used else 0)

    async def candidates_mentioning(self, project_id: int, now: float, words: list[str], limit: int) -> list[Entry]:
        """Candidates whose statement contains any of `words` (lower case), newest first."""
        if not words:
            return []
        likes = []
        args: list[Any] = [project_id, now]
        for word in words:
            likes.append("e.norm_statement LIKE ? ESCAPE '\\'")
            escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            args.append(f"%{escaped}%")
        return await self._entries(
            f"e.project_id = ? AND {STATE_FILTERS['candidate']} AND ({' OR '.join(likes)}) ORDER BY e.seq DESC LIMIT ?",
            *args,
            limit,
        )
