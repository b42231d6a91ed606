"""Every SQL statement of the gateway, written once for both backends.

`Queries` wraps one transaction (`Tx`).  Placeholders are `?`; the PostgreSQL
driver rewrites them.  JSON columns are TEXT holding JSON, moments are epoch
floats.  Full-text search differs by dialect and lives in `search_index`.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from gateway.core import jsonio
from gateway.core.clock import HOUR
from gateway.knowledge.model import ContradictionRecord, Entry, Project, ProjectSettings, Support
from gateway.store.base import Tx
from gateway.store.search_index import index_for


def _dump(value: Any) -> str | None:
    return None if value is None else jsonio.dumps_text(value, sort_keys=True)


def _where(*conditions: tuple[str, Any]) -> tuple[str, list[Any]]:
    """AND together the conditions whose value is given (not None)."""
    kept = [(sql, value) for sql, value in conditions if value is not None]
    return " AND ".join(sql for sql, _ in kept), [value for _, value in kept]


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


ENTRY_COLUMNS = (
    "e.seq, e.id, e.project_id, p.slug AS project_slug, e.kind, e.statement, e.evidence, e.state, "
    "e.created_at, e.created_by, e.created_via, e.expires_at, e.promoted_at, e.promoted_by, e.provenance"
)


def _project(row: dict[str, Any]) -> Project:
    return Project(
        id=row["id"],
        slug=row["slug"],
        created_at=row["created_at"],
        settings=ProjectSettings(
            k_distinct_issuers=int(row["k_distinct_issuers"]),
            window_days=float(row["window_days"]),
            playbook_min_trusted=int(row["playbook_min_trusted"]),
            playbook_top_n=int(row["playbook_top_n"]),
            demotions_per_hour=int(row["demotions_per_hour"]),
        ),
    )


def _entry(row: dict[str, Any]) -> Entry:
    return Entry(
        seq=row["seq"],
        id=row["id"],
        project_id=row["project_id"],
        project_slug=row["project_slug"],
        kind=row["kind"],
        statement=row["statement"],
        evidence=row["evidence"],
        state=row["state"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        created_via=row["created_via"],
        expires_at=row["expires_at"],
        promoted_at=row["promoted_at"],
        promoted_by=row["promoted_by"],
        provenance=_load(row["provenance"]),
    )


# Effective-state filters: an expired candidate or trusted entry reads as
# retired before the sweep writes it down.
STATE_FILTERS = {
    "candidate": "(e.state = 'candidate' AND (e.expires_at IS NULL OR e.expires_at > ?))",
    "trusted": "(e.state = 'trusted' AND (e.expires_at IS NULL OR e.expires_at > ?))",
    # The cast gives PostgreSQL the parameter's type; it is unused here but
    # keeps one `now` argument per filter.
    "contradicted": "(e.state = 'contradicted' AND CAST(? AS DOUBLE PRECISION) IS NOT NULL)",
    "retired": "(e.state = 'retired' OR (e.state IN ('candidate', 'trusted') AND e.expires_at <= ?))",
}


# PostgreSQL only: the entries a recall returns, each with its supports and
# contradictions as arrays of rows (see `Queries._recalled_entries`).
RECALLED_ENTRIES = (
    f"SELECT {ENTRY_COLUMNS}, "
    "(SELECT array_agg(ROW(s.issuer, s.source, s.attestation_id, s.at) ORDER BY s.id) "
    "FROM supports s WHERE s.entry_seq = e.seq) AS supports, "
    "(SELECT array_agg(ROW(c.by_principal, c.detail, c.at, c.until) ORDER BY c.id) "
    "FROM contradictions c WHERE c.entry_seq = e.seq) AS contradictions "
    "FROM entries e JOIN projects p ON p.id = e.project_id WHERE e.seq = ANY(CAST(? AS BIGINT[]))"
)
# PostgreSQL only: a recall and its results in one statement (the results
# row by row from three arrays; none for a recall that found nothing).
INSERT_RECALL = (
    "WITH r AS (INSERT INTO recalls (id, project_id, principal, query, kind, via, returned, at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq) "
    "INSERT INTO recall_results (recall_seq, entry_seq, rank, score) "
    "SELECT r.seq, x.entry_seq, x.rank, x.score FROM r, "
    "unnest(CAST(? AS BIGINT[]), CAST(? AS BIGINT[]), CAST(? AS DOUBLE PRECISION[])) AS x(entry_seq, rank, score)"
)


class Queries:
    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.index = index_for(tx)

    # -- cross-process serialisation -----------------------------------------

    async def serialize(self, key: str) -> None:
        """Hold a lock named `key` until this write transaction ends.

        For a unit that counts rows and then decides (a rate limit, "is this
        statement already stored"): on PostgreSQL two processes could both
        count before either inserts, so they take an advisory transaction
        lock on the key first.  SQLite needs nothing: its writes are one at a
        time (`BEGIN IMMEDIATE`), across processes too."""
        if self.tx.dialect == "postgres":
            await self.tx.one("SELECT pg_advisory_xact_lock(hashtextextended(?, 0)) AS locked", key)

    # -- meta ---------------------------------------------------------------

    async def meta_get(self, key: str) -> str | None:
        row = await self.tx.one("SELECT value FROM meta WHERE key = ?", key)
        return row["value"] if row else None

    async def meta_set_if_absent(self, key: str, value: str) -> str:
        await self.tx.run("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", key, value)
        stored = await self.meta_get(key)
        assert stored is not None
        return stored

    # -- projects -----------------------------------------------------------

    async def project_by_slug(self, slug: str) -> Project | None:
        row = await self.tx.one("SELECT * FROM projects WHERE slug = ?", slug)
        return _project(row) if row else None

    async def project_by_id(self, project_id: int, *, for_update: bool = False) -> Project | None:
        sql = "SELECT * FROM projects WHERE id = ?"
        if for_update and self.tx.dialect == "postgres":
            sql += " FOR UPDATE"
        row = await self.tx.one(sql, project_id)
        return _project(row) if row else None

    async def projects(self) -> list[Project]:
        return [_project(r) for r in await self.tx.all("SELECT * FROM projects ORDER BY slug")]

    async def insert_project(self, slug: str, settings: ProjectSettings, now: float, playbook: str) -> Project:
        await self.tx.run(
            "INSERT INTO projects (slug, created_at, k_distinct_issuers, window_days, playbook_min_trusted, "
            "playbook_top_n, demotions_per_hour, playbook) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            slug,
            now,
            settings.k_distinct_issuers,
            settings.window_days,
            settings.playbook_min_trusted,
            settings.playbook_top_n,
            settings.demotions_per_hour,
            playbook,
        )
        project = await self.project_by_slug(slug)
        assert project is not None
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

    # -- tokens -------------------------------------------------------------

    async def insert_token(self, project_id: int, principal: str, level: str, token_hash: str, now: float) -> None:
        await self.tx.run(
            "INSERT INTO tokens (project_id, principal, level, token_hash, created_at) VALUES (?, ?, ?, ?, ?)",
            project_id,
            principal,
            level,
            token_hash,
            now,
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

    # -- dashboard sessions -------------------------------------------------

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

    # -- entries ------------------------------------------------------------

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

    async def entry(self, project_id: int, entry_id: str, *, for_update: bool = False) -> Entry | None:
        sql = (
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id "
            "WHERE e.project_id = ? AND e.id = ?"
        )
        if for_update and self.tx.dialect == "postgres":
            sql += " FOR UPDATE OF e"
        row = await self.tx.one(sql, project_id, entry_id)
        if row is None:
            return None
        entry = _entry(row)
        await self.attach([entry])
        return entry

    async def entries_by_ids(self, project_id: int, entry_ids: list[str]) -> dict[str, Entry]:
        if not entry_ids:
            return {}
        marks = ", ".join("?" for _ in entry_ids)
        rows = await self.tx.all(
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id "
            f"WHERE e.project_id = ? AND e.id IN ({marks})",
            project_id,
            *entry_ids,
        )
        entries = [_entry(r) for r in rows]
        await self.attach(entries)
        return {e.id: e for e in entries}

    async def entries_by_seqs(self, seqs: list[int]) -> dict[int, Entry]:
        if not seqs:
            return {}
        marks = ", ".join("?" for _ in seqs)
        rows = await self.tx.all(
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id WHERE e.seq IN ({marks})",
            *seqs,
        )
        entries = [_entry(r) for r in rows]
        await self.attach(entries)
        return {e.seq: e for e in entries}

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
        state: str | None = None,
        kind: str | None = None,
        visible_to: str | None = None,
        text: str | None = None,
        before_seq: int | None = None,
        limit: int = 50,
    ) -> list[Entry]:
        """Newest first.  `visible_to` (a principal name) limits the page to
        that principal's own entries plus trusted ones; None means the owner's
        view of everything."""
        where = ["e.project_id = ?"]
        args: list[Any] = [project_id]
        if state is not None:
            where.append(STATE_FILTERS[state])
            args.append(now)
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
        rows = await self.tx.all(
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id "
            f"WHERE {' AND '.join(where)} ORDER BY e.seq DESC LIMIT ?",
            *args,
            limit,
        )
        entries = [_entry(r) for r in rows]
        await self.attach(entries)
        return entries

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
        row = await self.tx.one(
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id "
            "WHERE e.project_id = ? AND e.norm_statement = ? AND (e.expires_at IS NULL OR e.expires_at > ?) "
            "AND (e.state = 'trusted' OR (e.state = 'candidate' AND e.created_by = ?)) "
            "ORDER BY CASE WHEN e.state = 'trusted' THEN 0 ELSE 1 END, e.seq LIMIT 1",
            project_id,
            norm_statement,
            now,
            principal,
        )
        if row is None:
            return None
        entry = _entry(row)
        await self.attach([entry])
        return entry

    async def set_state(
        self,
        entry: Entry,
        state: str,
        *,
        promoted_at: float | None = None,
        promoted_by: str | None = None,
    ) -> None:
        """Move an entry and keep the recall index in step with `trusted`."""
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
        elif state != "trusted" and was_indexed:
            await self.index.remove(entry)

    async def expired_live_entries(self, now: float, limit: int = 500) -> list[Entry]:
        rows = await self.tx.all(
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id "
            "WHERE e.state IN ('candidate', 'trusted') AND e.expires_at IS NOT NULL AND e.expires_at <= ? "
            "ORDER BY e.seq LIMIT ?" + (" FOR UPDATE OF e SKIP LOCKED" if self.tx.dialect == "postgres" else ""),
            now,
            limit,
        )
        return [_entry(r) for r in rows]

    # -- supports and contradictions ------------------------------------------

    async def insert_support(self, entry: Entry, support: Support) -> bool:
        """False when this fingerprint (issuer + source) already supports it."""
        count = await self.tx.run(
            "INSERT INTO supports (entry_seq, issuer, source, attestation_id, at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (entry_seq, issuer, source) DO NOTHING",
            entry.seq,
            support.issuer,
            support.source,
            support.attestation_id,
            support.at,
        )
        if count:
            entry.supports.append(support)
        return bool(count)

    async def insert_contradiction(self, entry: Entry, record: ContradictionRecord) -> None:
        await self.tx.run(
            "INSERT INTO contradictions (entry_seq, project_id, by_principal, detail, at, until) VALUES (?, ?, ?, ?, ?, ?)",
            entry.seq,
            entry.project_id,
            record.by,
            _dump(record.detail),
            record.at,
            record.until,
        )
        entry.contradictions.append(record)

    async def demotions_since(self, project_id: int, principal: str, since: float) -> tuple[int, float | None]:
        # The count decides whether one more demotion passes: two refutes at
        # once on two processes must not both see the last free slot.
        return await self._count_since(
            f"demotions:{project_id}:{principal}",
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM contradictions WHERE project_id = ? AND by_principal = ? AND at > ?",
            project_id,
            principal,
            since,
        )

    async def _count_since(self, lock: str | None, sql: str, *args: Any) -> tuple[int, float | None]:
        """`sql`'s count `n` and its `oldest` time, with the lock named `lock`
        held (`serialize`) until the transaction ends: the count decides.
        No lock (None) for a pre-check in a read, which the write repeats."""
        if lock is not None:
            await self.serialize(lock)
        row = await self.tx.one(sql, *args)
        return (int(row["n"]), row["oldest"]) if row else (0, None)

    async def mark_rate_limited(self, project_id: int, principal: str, kind: str, now: float) -> bool:
        """True the first time in this clock hour: one ledger row per principal per hour."""
        return bool(
            await self.tx.run(
                "INSERT INTO rate_limit_marks (project_id, principal, kind, hour) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                project_id,
                principal,
                kind,
                int(now // HOUR),
            )
        )

    # -- audit and events ---------------------------------------------------

    async def audit(
        self, project_id: int, now: float, action: str, entry_id: str | None, actor: str, detail: Any = None
    ) -> None:
        await self.tx.run(
            "INSERT INTO audit (project_id, at, action, entry_id, actor, detail) VALUES (?, ?, ?, ?, ?, ?)",
            project_id,
            now,
            action,
            entry_id,
            actor,
            _dump(detail),
        )

    async def audit_rows(
        self,
        project_id: int,
        *,
        entry_id: str | None = None,
        action: str | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        where, args = _where(("project_id = ?", project_id), ("entry_id = ?", entry_id), ("action = ?", action),
                             ("id < ?", before_id))
        rows = await self.tx.all(
            f"SELECT id, at, action, entry_id, actor, detail FROM audit WHERE {where} "
            "ORDER BY id DESC LIMIT ?",
            *args,
            limit,
        )
        for row in rows:
            row["detail"] = _load(row["detail"])
        return rows

    async def insert_event(
        self, event_id: str, project_id: int, principal: str, type_: str, detail: Any, effect: str, now: float
    ) -> None:
        await self.tx.run(
            "INSERT INTO events (id, project_id, principal, type, detail, effect, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            event_id,
            project_id,
            principal,
            type_,
            _dump(detail),
            effect,
            now,
        )

    async def count_candidates_since(
        self, project_id: int, principal: str, since: float, *, lock: bool = True
    ) -> tuple[int, float | None]:
        """The candidates `principal` created since `since` by any path of
        its own (learn, extraction from its thread messages, its proposals;
        an approved reflection is its proposal, not a second candidate), and
        the oldest of them.  With `lock`, learn, threads and proposals
        serialise on one key, so two paths at once cannot both take the last
        free slot."""
        if lock:
            await self.serialize(f"budget:candidates:{project_id}:{principal}")
        row = await self.tx.one(
            "SELECT SUM(n) AS n, MIN(oldest) AS oldest FROM ("
            "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM entries "
            "WHERE project_id = ? AND created_by = ? AND created_at > ? AND created_via IN ('learn', 'extraction') "
            "UNION ALL SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM proposals "
            "WHERE project_id = ? AND proposed_by = ? AND created_at > ?) x",
            project_id,
            principal,
            since,
            project_id,
            principal,
            since,
        )
        return (int(row["n"] or 0), row["oldest"]) if row else (0, None)

    async def count_reads_since(
        self, project_id: int, principal: str, since: float, *, lock: bool = False
    ) -> tuple[int, float | None]:
        """`principal`'s recalls and recorded uses since `since` (the read
        budget), and the oldest of them.  Two index ranges: its recalls, and
        the project's uses of the hour joined to their recall's principal
        (a use belongs to the principal of the recall it answers)."""
        if lock:
            await self.serialize(f"budget:reads:{project_id}:{principal}")
        row = await self.tx.one(
            "SELECT SUM(n) AS n, MIN(oldest) AS oldest FROM ("
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM recalls WHERE project_id = ? AND principal = ? AND at > ? "
            "UNION ALL SELECT COUNT(*) AS n, MIN(ru.at) AS oldest FROM recall_uses ru "
            "JOIN recalls r ON r.seq = ru.recall_seq "
            "WHERE ru.project_id = ? AND ru.at > ? AND r.principal = ?) x",
            project_id,
            principal,
            since,
            project_id,
            since,
            principal,
        )
        return (int(row["n"] or 0), row["oldest"]) if row else (0, None)

    async def count_events_since(self, project_id: int, principal: str, since: float) -> tuple[int, float | None]:
        return await self._count_since(
            f"budget:events:{project_id}:{principal}",
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM events WHERE project_id = ? AND principal = ? AND at > ?",
            project_id,
            principal,
            since,
        )

    # -- recall -------------------------------------------------------------

    async def search(
        self, project_id: int, query: str, kind: str | None, limit: int, now: float
    ) -> list[tuple[Entry, float]]:
        hits = await self.index.search(project_id, query, kind, limit, now)
        seqs = [seq for seq, _ in hits]
        found = await (self._recalled_entries(seqs) if self.tx.dialect == "postgres" else self.entries_by_seqs(seqs))
        # Defence in depth: the index holds trusted entries only, but recall
        # is the gate's door, so the entry's own state has the last word.
        return [(found[seq], score) for seq, score in hits if seq in found and found[seq].effective_state(now) == "trusted"]

    async def _recalled_entries(self, seqs: list[int]) -> dict[int, Entry]:
        """`entries_by_seqs` in one statement (PostgreSQL): the rows, their
        supports and contradictions (each in id order, as `attach` reads
        them), one SQL text whatever the number of entries."""
        if not seqs:
            return {}
        entries: dict[int, Entry] = {}
        for row in await self.tx.all(RECALLED_ENTRIES, seqs):
            entry = _entry(row)
            entry.supports.extend(
                Support(issuer=issuer, source=source, attestation_id=attestation_id, at=at)
                for issuer, source, attestation_id, at in row["supports"] or ()
            )
            entry.contradictions.extend(
                ContradictionRecord(by=by, detail=_load(detail), at=at, until=until)
                for by, detail, at, until in row["contradictions"] or ()
            )
            entries[entry.seq] = entry
        return entries

    async def insert_recall(
        self,
        recall_id: str,
        project_id: int,
        principal: str,
        query: str,
        kind: str | None,
        via: str,
        results: list[tuple[Entry, float]],
        now: float,
    ) -> None:
        if self.tx.dialect == "postgres":
            # One statement, one SQL text: the recall and its results.
            await self.tx.run(
                INSERT_RECALL,
                recall_id,
                project_id,
                principal,
                query,
                kind,
                via,
                len(results),
                now,
                [entry.seq for entry, _ in results],
                list(range(len(results))),
                [score for _, score in results],
            )
            return
        row = await self.tx.one(
            "INSERT INTO recalls (id, project_id, principal, query, kind, via, returned, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
            recall_id,
            project_id,
            principal,
            query,
            kind,
            via,
            len(results),
            now,
        )
        assert row is not None
        if results:
            await self.tx.run_many(
                "INSERT INTO recall_results (recall_seq, entry_seq, rank, score) VALUES (?, ?, ?, ?)",
                [(row["seq"], entry.seq, rank, score) for rank, (entry, score) in enumerate(results)],
            )

    async def recall_hit(
        self, project_id: int, recall_id: str, principal: str, entry_id: str
    ) -> tuple[int, int] | None:
        row = await self.tx.one(
            "SELECT r.seq AS recall_seq, e.seq AS entry_seq FROM recalls r "
            "JOIN recall_results rr ON rr.recall_seq = r.seq "
            "JOIN entries e ON e.seq = rr.entry_seq "
            "WHERE r.project_id = ? AND r.id = ? AND r.principal = ? AND e.id = ?",
            project_id,
            recall_id,
            principal,
            entry_id,
        )
        return (row["recall_seq"], row["entry_seq"]) if row else None

    async def insert_recall_use(self, project_id: int, recall_seq: int, entry_seq: int, now: float) -> bool:
        return bool(
            await self.tx.run(
                "INSERT INTO recall_uses (recall_seq, entry_seq, project_id, at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                recall_seq,
                entry_seq,
                project_id,
                now,
            )
        )

    async def use_counts(self, entry_seqs: Iterable[int]) -> dict[int, int]:
        seqs = list(entry_seqs)
        if not seqs:
            return {}
        marks = ", ".join("?" for _ in seqs)
        rows = await self.tx.all(
            f"SELECT entry_seq, COUNT(*) AS n FROM recall_uses WHERE entry_seq IN ({marks}) GROUP BY entry_seq", *seqs
        )
        return {r["entry_seq"]: int(r["n"]) for r in rows}

    # -- attestation replay and delivery stores -------------------------------

    async def reserve_jti(self, issuer: str, jti: str, expires_at: float, now: float) -> bool:
        """True if this (issuer, jti) was never seen while it could be accepted."""
        # One statement: a new key is inserted, an expired one taken over;
        # a live one changes nothing (0 rows), also when two processes race.
        return bool(
            await self.tx.run(
                "INSERT INTO seen_tokens (issuer, jti, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (issuer, jti) DO UPDATE SET expires_at = excluded.expires_at "
                "WHERE seen_tokens.expires_at <= ?",
                issuer,
                jti,
                expires_at,
                now,
            )
        )

    async def prune_replay_records(self, now: float, webhook_id_before: float) -> int:
        """Forget what can no longer be replayed: tokens past their
        acceptance window, and Standard Webhooks ids older than the timestamp
        tolerance (a replay that old is refused as stale anyway).  GitHub's
        run keys are kept: its deliveries carry no signed timestamp."""
        tokens = await self.tx.run("DELETE FROM seen_tokens WHERE expires_at <= ?", now)
        ids = await self.tx.run(
            "DELETE FROM webhook_deliveries WHERE delivery_key LIKE 'webhook-id:%' AND at < ?", webhook_id_before
        )
        return tokens + ids

    async def reserve_delivery(self, source: str, key: str, now: float) -> bool:
        return bool(
            await self.tx.run(
                "INSERT INTO webhook_deliveries (source, delivery_key, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                source,
                key,
                now,
            )
        )

    async def insert_attestation(
        self,
        attestation_id: str,
        project_id: int,
        issuer: str,
        check: str,
        outcome: str,
        counted: bool,
        reason: str | None,
        provenance: Any,
        run_url: str | None,
        now: float,
    ) -> None:
        await self.tx.run(
            "INSERT INTO attestations (id, project_id, issuer, check_name, outcome, counted, reason, provenance, run_url, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            attestation_id,
            project_id,
            issuer,
            check,
            outcome,
            1 if counted else 0,
            reason,
            _dump(provenance),
            run_url,
            now,
        )

    async def count_rows(self, table: str) -> int:
        assert table.isidentifier()
        row = await self.tx.one(f"SELECT COUNT(*) AS n FROM {table}")
        return int(row["n"]) if row else 0

    # -- the owner's side: proposals, thread messages, playbook, learning, checks
    # (issue 5).  Rows are returned as dicts; gateway.knowledge.proposals, gateway.recall.learning
    # and gateway.knowledge.playbook shape them.

    def _day(self, column: str) -> str:
        """The UTC day number of an epoch column (moments are never negative,
        so SQLite's truncating CAST is a floor; PostgreSQL's CAST rounds)."""
        if self.tx.dialect == "postgres":
            return f"CAST(FLOOR({column} / 86400) AS BIGINT)"
        return f"CAST({column} / 86400 AS INTEGER)"

    async def insert_proposal(
        self,
        proposal_id: str,
        project_id: int,
        kind: str,
        statement: str,
        rationale: str | None,
        proposed_by: str,
        now: float,
    ) -> dict[str, Any]:
        await self.tx.run(
            "INSERT INTO proposals (id, project_id, kind, statement, rationale, proposed_by, state, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)",
            proposal_id,
            project_id,
            kind,
            statement,
            rationale,
            proposed_by,
            now,
        )
        row = await self.proposal(project_id, proposal_id)
        assert row is not None
        return row

    async def proposal(self, project_id: int, proposal_id: str, *, for_update: bool = False) -> dict[str, Any] | None:
        sql = "SELECT * FROM proposals WHERE project_id = ? AND id = ?"
        if for_update and self.tx.dialect == "postgres":
            sql += " FOR UPDATE"
        return await self.tx.one(sql, project_id, proposal_id)

    async def list_proposals(
        self, project_id: int, *, state: str | None = None, before_seq: int | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        where, args = _where(("project_id = ?", project_id), ("state = ?", state), ("seq < ?", before_seq))
        return await self.tx.all(f"SELECT * FROM proposals WHERE {where} ORDER BY seq DESC LIMIT ?", *args, limit)

    async def count_proposals(self, project_id: int) -> dict[str, int]:
        rows = await self.tx.all(
            "SELECT state, COUNT(*) AS n FROM proposals WHERE project_id = ? GROUP BY state", project_id
        )
        return {r["state"]: int(r["n"]) for r in rows}

    async def decide_proposal(
        self, seq: int, state: str, now: float, decided_by: str, reason: str | None, entry_id: str | None
    ) -> bool:
        """False when the proposal was decided already (only `pending` moves)."""
        return bool(
            await self.tx.run(
                "UPDATE proposals SET state = ?, decided_at = ?, decided_by = ?, reason = ?, entry_id = ? "
                "WHERE seq = ? AND state = 'pending'",
                state,
                now,
                decided_by,
                reason,
                entry_id,
                seq,
            )
        )

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
        day = self._day("ru.at")
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
        day = self._day("at")
        return await self.tx.all(
            f"SELECT {day} AS day, COUNT(*) AS recalls, CAST(COALESCE(SUM(returned), 0) AS BIGINT) AS returned "
            f"FROM recalls WHERE project_id = ? AND at >= ? GROUP BY {day} ORDER BY 1",
            project_id,
            since,
        )

    async def use_days(self, project_id: int, since: float) -> list[dict[str, Any]]:
        """Per UTC day of the recall: returned entries reported used."""
        day = self._day("r.at")
        return await self.tx.all(
            f"SELECT {day} AS day, COUNT(*) AS used, COUNT(DISTINCT ru.recall_seq) AS recalls_with_use "
            "FROM recall_uses ru JOIN recalls r ON r.seq = ru.recall_seq "
            f"WHERE r.project_id = ? AND r.at >= ? GROUP BY {day} ORDER BY 1",
            project_id,
            since,
        )

    async def entry_recall_counts(self, project_id: int, since: float) -> dict[int, tuple[int, int]]:
        """entry seq -> (times returned, times used), over recalls made since `since`."""
        counts: dict[int, tuple[int, int]] = {}
        for row in await self.tx.all(
            "SELECT rr.entry_seq, COUNT(*) AS n FROM recall_results rr JOIN recalls r ON r.seq = rr.recall_seq "
            "WHERE r.project_id = ? AND r.at >= ? GROUP BY rr.entry_seq",
            project_id,
            since,
        ):
            counts[int(row["entry_seq"])] = (int(row["n"]), 0)
        for row in await self.tx.all(
            "SELECT ru.entry_seq, COUNT(*) AS n FROM recall_uses ru JOIN recalls r ON r.seq = ru.recall_seq "
            "WHERE r.project_id = ? AND r.at >= ? GROUP BY ru.entry_seq",
            project_id,
            since,
        ):
            returned, _ = counts.get(int(row["entry_seq"]), (0, 0))
            counts[int(row["entry_seq"])] = (returned, int(row["n"]))
        return counts

    async def never_recalled(self, project_id: int, now: float, limit: int) -> tuple[int, list[Entry]]:
        """Trusted, unexpired entries no recall ever returned: (how many, the oldest few)."""
        clause = (
            f"e.project_id = ? AND {STATE_FILTERS['trusted']} "
            "AND NOT EXISTS (SELECT 1 FROM recall_results rr WHERE rr.entry_seq = e.seq)"
        )
        row = await self.tx.one(f"SELECT COUNT(*) AS n FROM entries e WHERE {clause}", project_id, now)
        rows = await self.tx.all(
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id WHERE {clause} "
            "ORDER BY e.seq ASC LIMIT ?",
            project_id,
            now,
            limit,
        )
        return (int(row["n"]) if row else 0), [_entry(r) for r in rows]

    async def entry_recall_stats(self, entry_seq: int) -> tuple[int, int]:
        """(times returned by a recall, times reported used) for one entry, ever."""
        returned = await self.tx.one("SELECT COUNT(*) AS n FROM recall_results WHERE entry_seq = ?", entry_seq)
        used = await self.tx.one("SELECT COUNT(*) AS n FROM recall_uses WHERE entry_seq = ?", entry_seq)
        return (int(returned["n"]) if returned else 0), (int(used["n"]) if used else 0)

    async def check_outcomes(self, project_id: int) -> list[dict[str, Any]]:
        """Attestations grouped by check, issuer, outcome and whether they counted."""
        return await self.tx.all(
            "SELECT check_name, issuer, outcome, counted, COUNT(*) AS n, MAX(at) AS last_at FROM attestations "
            "WHERE project_id = ? GROUP BY check_name, issuer, outcome, counted ORDER BY check_name, issuer",
            project_id,
        )

    async def latest_check_reasons(self, project_id: int) -> dict[str, str | None]:
        """Each check's most recent `reason` (None when its latest attestation counted)."""
        rows = await self.tx.all(
            "SELECT a.check_name, a.reason FROM attestations a JOIN ("
            "SELECT check_name, MAX(seq) AS seq FROM attestations WHERE project_id = ? GROUP BY check_name"
            ") latest ON latest.seq = a.seq",
            project_id,
        )
        return {r["check_name"]: r["reason"] for r in rows}

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
        rows = await self.tx.all(
            f"SELECT {ENTRY_COLUMNS} FROM entries e JOIN projects p ON p.id = e.project_id "
            f"WHERE e.project_id = ? AND {STATE_FILTERS['candidate']} AND ({' OR '.join(likes)}) "
            "ORDER BY e.seq DESC LIMIT ?",
            *args,
            limit,
        )
        return [_entry(r) for r in rows]

    # -- CI attestations: key refresh slots, listings, check map lookups ------

    async def claim_jwks_refresh(self, issuer: str, now: float, cooldown: float) -> bool:
        """Take this issuer's JWKS refresh slot if no process took it in the
        last `cooldown` seconds: one refresh per issuer per cooldown for the
        whole gateway, across processes."""
        await self.tx.run("INSERT INTO jwks_refreshes (issuer, at) VALUES (?, ?) ON CONFLICT DO NOTHING", issuer, -1.0)
        return bool(
            await self.tx.run(
                "UPDATE jwks_refreshes SET at = ? WHERE issuer = ? AND at <= ?", now, issuer, now - cooldown
            )
        )

    async def jwks_refreshed_at(self, issuer: str) -> float | None:
        row = await self.tx.one("SELECT at FROM jwks_refreshes WHERE issuer = ?", issuer)
        return float(row["at"]) if row and row["at"] >= 0 else None

    async def entry_projects(self, entry_ids: list[str]) -> dict[str, int]:
        """The project of each id that is an entry (unknown ids are absent)."""
        if not entry_ids:
            return {}
        marks = ", ".join("?" for _ in entry_ids)
        rows = await self.tx.all(f"SELECT id, project_id FROM entries WHERE id IN ({marks})", *entry_ids)
        return {r["id"]: int(r["project_id"]) for r in rows}

    async def list_attestations(
        self, project_id: int, *, check: str | None = None, before_seq: int | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Newest first: what CI said, counted or not."""
        where, args = _where(("project_id = ?", project_id), ("check_name = ?", check), ("seq < ?", before_seq))
        rows = await self.tx.all(
            "SELECT seq, id, issuer, check_name, outcome, counted, reason, provenance, run_url, at FROM attestations "
            f"WHERE {where} ORDER BY seq DESC LIMIT ?",
            *args,
            limit,
        )
        for row in rows:
            row["counted"] = bool(row["counted"])
            row["provenance"] = _load(row["provenance"])
        return rows

    async def check_summary(self, project_id: int) -> list[dict[str, Any]]:
        """Per check and issuer: how many attestations, how many counted, the last one."""
        return await self.tx.all(
            "SELECT check_name, issuer, COUNT(*) AS attestations, SUM(counted) AS counted, MAX(at) AS last_at "
            "FROM attestations WHERE project_id = ? GROUP BY check_name, issuer ORDER BY check_name, issuer",
            project_id,
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

    async def support_exists(self, project_id: int, entry_id: str, issuer: str, source: str) -> bool:
        """Whether this fingerprint (issuer + source) already supports this
        entry of this project: the common case of a CI rerun, answered
        without loading the entry."""
        row = await self.tx.one(
            "SELECT 1 AS found FROM supports s JOIN entries e ON e.seq = s.entry_seq "
            "WHERE e.project_id = ? AND e.id = ? AND s.issuer = ? AND s.source = ?",
            project_id,
            entry_id,
            issuer,
            source,
        )
        return row is not None
