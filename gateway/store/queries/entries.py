"""Entries: the table of facts, read with their supports and contradictions."""

from __future__ import annotations

from typing import Any

from gateway.knowledge.model import ContradictionRecord, Entry, Support
from gateway.store.queries.common import STATE_FILTERS, _dump, _load
from gateway.store.queries.vectors import VectorQueries


class EntryQueries(VectorQueries):
    async def insert_entry(self, entry: Entry, norm_statement: str) -> Entry:
        """Store a new entry and return it with its sequence number.  A new
        entry has no supports or contradictions, so nothing is read back."""
        row = await self.tx.one(
            "INSERT INTO entries (id, project_id, kind, statement, evidence, norm_statement, state, created_at, "
            "created_by, created_via, expires_at, promoted_at, promoted_by, provenance) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
            entry.id,
            entry.project_id,
            entry.kind,
            entry.statement,
            entry.evidence,
            norm_statement,
            entry.state,
            entry.created_at,
            entry.created_by,
            entry.created_via,
            entry.expires_at,
            entry.promoted_at,
            entry.promoted_by,
            _dump(entry.provenance),
        )
        assert row is not None
        entry.seq = int(row["seq"])
        return entry

    async def _attached(self, where: str, *args: Any) -> list[Entry]:
        """The entries `WHERE {where}` selects, with their supports and contradictions."""
        entries = await self._entries(where, *args)
        await self.attach(entries)
        return entries

    async def entry(self, project_id: int, entry_id: str, *, for_update: bool = False) -> Entry | None:
        lock = self.dialect.lock_rows(of="e") if for_update else ""
        found = await self._attached(f"e.project_id = ? AND e.id = ?{lock}", project_id, entry_id)
        return found[0] if found else None

    async def entries_by_ids(self, project_id: int, entry_ids: list[str]) -> dict[str, Entry]:
        if not entry_ids:
            return {}
        marks = ", ".join("?" for _ in entry_ids)
        found = await self._attached(f"e.project_id = ? AND e.id IN ({marks})", project_id, *entry_ids)
        return {e.id: e for e in found}

    async def entries_by_seqs(self, seqs: list[int]) -> dict[int, Entry]:
        if not seqs:
            return {}
        marks = ", ".join("?" for _ in seqs)
        return {e.seq: e for e in await self._attached(f"e.seq IN ({marks})", *seqs)}

    async def attach(self, entries: list[Entry]) -> None:
        """Load supports and contradictions for a page of entries in two queries."""
        if not entries:
            return
        by_seq = {e.seq: e for e in entries}
        marks = ", ".join("?" for _ in by_seq)
        seqs = list(by_seq)
        for row in await self.tx.all(
            f"SELECT entry_seq, issuer, source, attestation_id, at FROM supports WHERE entry_seq IN ({marks}) ORDER BY id",
            *seqs,
        ):
            by_seq[row["entry_seq"]].supports.append(
                Support(issuer=row["issuer"], source=row["source"], attestation_id=row["attestation_id"], at=row["at"])
            )
        for row in await self.tx.all(
            f"SELECT entry_seq, by_principal, detail, at, until FROM contradictions WHERE entry_seq IN ({marks}) ORDER BY id",
            *seqs,
        ):
            by_seq[row["entry_seq"]].contradictions.append(
                ContradictionRecord(by=row["by_principal"], detail=_load(row["detail"]), at=row["at"], until=row["until"])
            )

    async def list_entries(
        self,
        project_id: int,
        now: float,
        *,
        states: tuple[str, ...] = (),
        kind: str | None = None,
        visible_to: str | None = None,
        text: str | None = None,
        before_seq: int | None = None,
        limit: int = 50,
    ) -> list[Entry]:
        """Newest first, in any of `states` (every state when empty).
        `visible_to` (a principal name) limits the page to that principal's
        own entries plus trusted ones; None means the owner's view of
        everything."""
        where = ["e.project_id = ?"]
        args: list[Any] = [project_id]
        if states:
            where.append("(" + " OR ".join(STATE_FILTERS[state] for state in states) + ")")
            args.extend([now] * len(states))
        if kind is not None:
            where.append("e.kind = ?")
            args.append(kind)
        if visible_to is not None:
            where.append(f"(e.created_by = ? OR {STATE_FILTERS['trusted']})")
            args.extend([visible_to, now])
        if text:
            where.append("e.norm_statement LIKE ? ESCAPE '\\'")
            escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            args.append(f"%{' '.join(escaped.casefold().split())}%")
        if before_seq is not None:
            where.append("e.seq < ?")
            args.append(before_seq)
        return await self._attached(f"{' AND '.join(where)} ORDER BY e.seq DESC LIMIT ?", *args, limit)

    async def count_entries(self, project_id: int, now: float) -> dict[str, int]:
        counts = {}
        for state, clause in STATE_FILTERS.items():
            row = await self.tx.one(f"SELECT COUNT(*) AS n FROM entries e WHERE e.project_id = ? AND {clause}", project_id, now)
            counts[state] = int(row["n"]) if row else 0
        return counts

    async def live_duplicate(self, project_id: int, norm_statement: str, principal: str, now: float) -> Entry | None:
        """A live entry with this statement that `principal` may see: its own
        (candidate or trusted) or a trusted one.  Another principal's candidate
        is never matched, so learn cannot be used to probe for it."""
        # Two processes learning the same statement at once store it once.
        await self.serialize(f"statement:{project_id}:{norm_statement}")
        found = await self._attached(
            "e.project_id = ? AND e.norm_statement = ? AND (e.expires_at IS NULL OR e.expires_at > ?) "
            "AND (e.state = 'trusted' OR (e.state = 'candidate' AND e.created_by = ?)) "
            "ORDER BY CASE WHEN e.state = 'trusted' THEN 0 ELSE 1 END, e.seq LIMIT 1",
            project_id,
            norm_statement,
            now,
            principal,
        )
        return found[0] if found else None

    async def set_state(
        self,
        entry: Entry,
        state: str,
        *,
        promoted_at: float | None = None,
        promoted_by: str | None = None,
    ) -> None:
        """Move an entry and keep the recall index and its vector row in step with `trusted`."""
        was_indexed = entry.state == "trusted"
        if promoted_at is not None:
            await self.tx.run(
                "UPDATE entries SET state = ?, promoted_at = ?, promoted_by = ? WHERE seq = ?",
                state,
                promoted_at,
                promoted_by,
                entry.seq,
            )
            entry.promoted_at, entry.promoted_by = promoted_at, promoted_by
        else:
            await self.tx.run("UPDATE entries SET state = ? WHERE seq = ?", state, entry.seq)
        entry.state = state
        if state == "trusted" and not was_indexed:
            await self.index.add(entry)
            await self.track_vector(entry.seq, entry.project_id)
        elif state != "trusted" and was_indexed:
            await self.index.remove(entry)
            await self.untrack_vector(entry.seq)

    async def set_expiry(self, entry: Entry, expires_at: float | None) -> None:
        """An owner's new expiry.  Recall checks expiry at query time (the
        entry leaves recall at that instant); the index of a trusted entry
        is told too: PostgreSQL's keeps the expiry beside its row to filter
        on it (SQLite's reads it from the entry)."""
        await self.tx.run("UPDATE entries SET expires_at = ? WHERE seq = ?", expires_at, entry.seq)
        entry.expires_at = expires_at
        if entry.state == "trusted":
            await self.index.changed(entry)

    async def corrections_of(self, project_id: int, entry_id: str, limit: int = 20) -> list[Entry]:
        """The entries written as corrections of `entry_id`, newest first.
        The link lives in the correction's provenance (`{"replaces": id}`),
        so this reads the provenance text and checks the parsed value."""
        escaped = entry_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        found = await self._entries(
            "e.project_id = ? AND e.provenance LIKE ? ESCAPE '\\' ORDER BY e.seq DESC LIMIT ?",
            project_id,
            f'%"replaces":"{escaped}"%',
            limit,
        )
        entries = [e for e in found if (e.provenance or {}).get("replaces") == entry_id]
        await self.attach(entries)
        return entries

    async def expired_live_entries(self, now: float, limit: int = 500) -> list[Entry]:
        return await self._entries(
            "e.state IN ('candidate', 'trusted') AND e.expires_at IS NOT NULL AND e.expires_at <= ? "
            "ORDER BY e.seq LIMIT ?" + self.dialect.lock_rows(of="e", skip_locked=True),
            now,
            limit,
        )

    async def entry_projects(self, entry_ids: list[str]) -> dict[str, int]:
        """The project of each id that is an entry (unknown ids are absent)."""
        if not entry_ids:
            return {}
        marks = ", ".join("?" for _ in entry_ids)
        rows = await self.tx.all(f"SELECT id, project_id FROM entries WHERE id IN ({marks})", *entry_ids)
        return {r["id"]: int(r["project_id"]) for r in rows}
