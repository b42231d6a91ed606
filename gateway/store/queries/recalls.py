"""Recalls: the lexical search, the record of what it returned, and the uses reported."""

from __future__ import annotations

from gateway.knowledge.model import ContradictionRecord, Entry, Support
from gateway.store.queries.common import ENTRY_COLUMNS, _entry, _load
from gateway.store.queries.entries import EntryQueries
from gateway.store.recall_index import Candidate, Terms


# Where arrays bind (PostgreSQL): a recall's entries with their supports and contradictions, one statement.
RECALLED_ENTRIES = (
    f"SELECT {ENTRY_COLUMNS}, "
    "(SELECT array_agg(ROW(s.issuer, s.source, s.attestation_id, s.at) ORDER BY s.id) "
    "FROM supports s WHERE s.entry_seq = e.seq) AS supports, "
    "(SELECT array_agg(ROW(c.by_principal, c.detail, c.at, c.until) ORDER BY c.id) "
    "FROM contradictions c WHERE c.entry_seq = e.seq) AS contradictions "
    "FROM entries e JOIN projects p ON p.id = e.project_id WHERE e.seq = ANY(CAST(? AS BIGINT[]))"
)
# Where arrays bind (PostgreSQL): a recall and its results (from three arrays) in one statement.
INSERT_RECALL = (
    "WITH r AS (INSERT INTO recalls (id, project_id, principal, query, kind, via, returned, at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq) "
    "INSERT INTO recall_results (recall_seq, entry_seq, rank, score) "
    "SELECT r.seq, x.entry_seq, x.rank, x.score FROM r, "
    "unnest(CAST(? AS BIGINT[]), CAST(? AS BIGINT[]), CAST(? AS DOUBLE PRECISION[])) AS x(entry_seq, rank, score)"
)
# Where the store keeps recall counters (SQLite): every FOLD_EVERY-th recall adds
# the results since the last fold to each entry's count (a commit writes the
# counters' pages once per hundred recalls); readers add `RETURNED_SINCE_FOLD`.
FOLD_EVERY = 100
FOLDED_UP_TO = "(SELECT up_to FROM recall_counts_folded)"
FOLD_RETURNED = (
    "INSERT INTO recall_counts (entry_seq, returned) "
    f"SELECT entry_seq, COUNT(*) FROM recall_results WHERE recall_seq > {FOLDED_UP_TO} AND recall_seq <= ? "
    "GROUP BY entry_seq "
    "ON CONFLICT (entry_seq) DO UPDATE SET returned = recall_counts.returned + excluded.returned"
)
# The result rows a fold has not counted yet (the primary key's own index
# reads them: they are the newest recalls').
RETURNED_SINCE_FOLD = f"SELECT entry_seq FROM recall_results WHERE recall_seq > {FOLDED_UP_TO}"


class RecallQueries(EntryQueries):
    async def lexical(
        self, project_id: int, terms: Terms, kind: str | None, limit: int, now: float
    ) -> list[Candidate]:
        """The project's best `limit` trusted, unexpired entries (of `kind`)
        holding any of the weighted words, by the index's own BM25."""
        return await self.index.lexical(project_id, terms, kind, limit, now)

    async def recall_generation(self, project_id: int) -> int:
        """The project's recall generation (`gateway.store.recall_index`)."""
        row = await self.tx.one("SELECT generation FROM recall_index WHERE project_id = ?", project_id)
        return int(row["generation"]) if row else 0

    async def recalled_entries(self, seqs: list[int]) -> dict[int, Entry]:
        """`entries_by_seqs`, in one statement where arrays bind."""
        if not self.dialect.array_params:
            return await self.entries_by_seqs(seqs)
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
        """The recall and its results (and, every FOLD_EVERY-th, the fold)."""
        recall = (recall_id, project_id, principal, query, kind, via, len(results), now)
        if self.dialect.array_params:
            # One statement, one SQL text: the recall and its results.
            await self.tx.run(
                INSERT_RECALL,
                *recall,
                [entry.seq for entry, _ in results],
                list(range(len(results))),
                [score for _, score in results],
            )
        else:
            row = await self.tx.one(
                "INSERT INTO recalls (id, project_id, principal, query, kind, via, returned, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
                *recall,
            )
            assert row is not None
            if results:
                await self.tx.run_many(
                    "INSERT INTO recall_results (recall_seq, entry_seq, rank, score) VALUES (?, ?, ?, ?)",
                    [(row["seq"], entry.seq, rank, score) for rank, (entry, score) in enumerate(results)],
                )
            if self.dialect.recall_counters and int(row["seq"]) % FOLD_EVERY == 0:
                await self.fold_returned(int(row["seq"]))

    async def fold_returned(self, up_to: int | None = None) -> None:
        """Where the store keeps recall counters: add the results of the
        recalls after the last fold, up to recall seq `up_to` (all of them
        when None), to the counters, and move the fold's mark, in this
        unit.  Folding twice counts nothing twice."""
        if not self.dialect.recall_counters:
            return
        if up_to is None:
            row = await self.tx.one("SELECT COALESCE(MAX(seq), 0) AS top FROM recalls")
            up_to = int(row["top"]) if row else 0
        await self.tx.run(FOLD_RETURNED, up_to)
        await self.tx.run("UPDATE recall_counts_folded SET up_to = ? WHERE up_to < ?", up_to, up_to)

    async def recall_hit(self, project_id: int, recall_id: str, principal: str, entry_id: str) -> tuple[int, int] | None:
        row = await self.tx.one(
            "SELECT r.seq AS recall_seq, e.seq AS entry_seq FROM recalls r JOIN recall_results rr ON rr.recall_seq = r.seq "
            "JOIN entries e ON e.seq = rr.entry_seq WHERE r.project_id = ? AND r.id = ? AND r.principal = ? AND e.id = ?",
            project_id, recall_id, principal, entry_id,
        )
        return (row["recall_seq"], row["entry_seq"]) if row else None

    async def insert_recall_use(self, project_id: int, recall_seq: int, entry_seq: int, now: float) -> bool:
        return bool(await self.tx.run(
            "INSERT INTO recall_uses (recall_seq, entry_seq, project_id, at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            recall_seq, entry_seq, project_id, now,
        ))
