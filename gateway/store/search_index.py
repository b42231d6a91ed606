"""The recall index: full-text search over a project's trusted entries.

Only trusted entries are indexed, and each project has an index of its own,
so a project's recall never scores rows of other projects or candidates
(the hub may hold a million entries; one project's recall reads its own).
The index is kept in step with the `trusted` state inside the transaction
that moves the entry (`Queries.set_state`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional, Protocol, Sequence

from gateway.knowledge.model import Entry
from gateway.store import bm25
from gateway.store.bm25_ranking import column_weights, frequencies
from gateway.store.bm25_ranking import ranking as ranking_of
from gateway.store.fts_counts import Key, PhraseCounts, TableCounts
from gateway.store.fts_memory import HELD_ROWS, TOKENIZE, HeldTable
from gateway.recall.search import (
    DEFAULT_RANKING,
    COMMON_ROWS,
    Candidate,
    Phrase,
    Pruned,
    QueryPlan,
    Ranking,
    fts5_expression,
    fuse,
    identifier_parts,
    plan_query,
    prune,
    rerank,
)

if TYPE_CHECKING:
    from gateway.store.bm25_arrays import ArrayTable

COLUMNS = "statement, evidence, kind, aliases"


class SearchIndex(Protocol):
    async def create_project(self, project_id: int) -> None: ...

    async def add(self, entry: Entry) -> None: ...

    async def remove(self, entry: Entry) -> None: ...

    async def set_expiry(self, entry: Entry) -> None: ...

    async def supported(self, entry: Entry) -> None: ...

    async def add_many(self, project_id: int, rows: Sequence[IndexRow]) -> None: ...

    async def search(
        self, project_id: int, query: str, kind: str | None, limit: int, now: float
    ) -> list[tuple[int, float]]: ...

    async def entries(
        self, project_id: int, seqs: list[int], fetch: Callable[[list[int]], Awaitable[dict[int, Entry]]]
    ) -> dict[int, Entry]: ...


# (seq, kind, expires_at, statement, evidence) of an entry to index in bulk.
IndexRow = tuple[int, str, Optional[float], str, Optional[str]]


def _values(statement: str, evidence: str | None, kind: str) -> tuple[str, str, str, str]:
    evidence = evidence or ""
    return statement, evidence, kind, identifier_parts(f"{statement} {evidence}")


def _row(entry: Entry) -> tuple[str, str, str, str]:
    return _values(entry.statement, entry.evidence, entry.kind)


class SqliteFtsIndex:
    """One contentless FTS5 table per project, rowid = entries.seq.

    Columns: statement, evidence, kind, and `aliases` (the parts of
    identifiers written together, see `gateway.recall.search.identifier_parts`).
    The table is contentless, so `remove` must pass the very values `add`
    indexed: `_row` is the one place that computes them."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx
        # The versions `search` read in this snapshot, by project: what the
        # entries it found may be kept with (`entries`).
        self._read: dict[int, TableCounts] = {}

    @staticmethod
    def table(project_id: int) -> str:
        return f"fts_p{int(project_id)}"

    async def create_project(self, project_id: int) -> None:
        await self.tx.run(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.table(project_id)} USING fts5("
            f"{COLUMNS}, content='', tokenize='{TOKENIZE}')"
        )

    async def add(self, entry: Entry) -> None:
        await self.tx.run(
            f"INSERT INTO {self.table(entry.project_id)} (rowid, {COLUMNS}) VALUES (?, ?, ?, ?, ?)",
            entry.seq,
            *_row(entry),
        )

    async def add_many(self, project_id: int, rows: Sequence[IndexRow]) -> None:
        """Index many entries of one project at once, none indexed yet (the
        bulk loaders of the benches and tests; the values are `add`'s)."""
        await self.tx.run_many(
            f"INSERT INTO {self.table(project_id)} (rowid, {COLUMNS}) VALUES (?, ?, ?, ?, ?)",
            [(seq, *_values(statement, evidence, kind)) for seq, kind, _, statement, evidence in rows],
        )

    async def remove(self, entry: Entry) -> None:
        table = self.table(entry.project_id)
        await self.tx.run(
            f"INSERT INTO {table} ({table}, rowid, {COLUMNS}) VALUES ('delete', ?, ?, ?, ?, ?)",
            entry.seq,
            *_row(entry),
        )

    async def set_expiry(self, entry: Entry) -> None:
        """FTS5 holds no expiry, but the project's held copy does
        (`gateway.store.fts_memory`), and so do its kept entries."""
        await self.rewrite(entry)

    async def supported(self, entry: Entry) -> None:
        """A trusted entry gained a support: a recall shows it, so the
        entries kept with the index's version must go."""
        await self.rewrite(entry)

    async def rewrite(self, entry: Entry) -> None:
        """The row written again as it was: what the index holds is the
        same, but its version changes, so every copy a process keeps of the
        old version (`gateway.store.fts_counts`) is dropped."""
        await self.remove(entry)
        await self.add(entry)

    async def search(
        self,
        project_id: int,
        query: str,
        kind: str | None,
        limit: int,
        now: float,
        *,
        ranking: Ranking | None = None,
    ) -> list[tuple[int, float]]:
        ranking = ranking or DEFAULT_RANKING
        plan = plan_query(query, ranking)
        if plan.empty:
            return []
        # A few more candidates than asked, so the kind-hint boost can lift
        # an entry that BM25 alone put just below the cut.
        wanted = max(limit, min(ranking.candidates, limit * 3))
        cache: PhraseCounts | None = getattr(self.tx, "phrase_counts", None)
        known = await cache.table(self.tx, self.table(project_id)) if cache is not None else None
        if known is not None:
            self._read[project_id] = known
        if cache is not None and known is not None and not any(p.prefix for p in plan.phrases):
            if known.rows <= HELD_ROWS:
                if not known.rows:
                    return []
                held = await cache.held(self.tx, self.table(project_id), known)
                found = self._held_ranking(held, cache, plan, kind, limit, wanted, ranking, now)
                return rerank(found, plan, ranking, limit)
            arrays = cache.arrays(self.table(project_id), known)
            if arrays is not None:
                ranked = self._array_ranking(arrays, cache, plan, kind, limit, wanted, ranking, now)
                if ranked is not None:
                    return rerank(ranked, plan, ranking, limit)
        for attempt in range(2):
            hits = await self._ranked(project_id, plan, kind, wanted, ranking, known)
            live = await self._live(list(hits), kind, now)
            # Expired entries leave recall at once but the index only at the
            # sweep: if they crowded the top, look further down once.
            if len(live) >= min(limit, len(hits)) or len(hits) < wanted or attempt:
                break
            wanted *= 8
        candidates = [Candidate(seq, hits[seq], live[seq]) for seq in hits if seq in live]
        return rerank(candidates, plan, ranking, limit)

    async def entries(
        self, project_id: int, seqs: list[int], fetch: Callable[[list[int]], Awaitable[dict[int, Entry]]]
    ) -> dict[int, Entry]:
        """The entries a search of this snapshot found (`fetch` reads them):
        on a reader, kept with the version of the project's index that the
        search read, so a question's answers are not read again until the
        index changes.  A bigger project's are kept packed
        (`gateway.store.packed_entries`): its recalls return ever new
        entries, and keeping them all as objects made the garbage collector
        walk thousands of them at every pass (a 10k-entry project's p99 rose
        by milliseconds)."""
        known = self._read.get(project_id)
        cache: PhraseCounts | None = getattr(self.tx, "phrase_counts", None)
        if known is None or cache is None:
            return await fetch(seqs)
        return await cache.entries(known, seqs, fetch, packed=known.rows > HELD_ROWS)

    @staticmethod
    def _held_ranking(
        held: HeldTable, cache: PhraseCounts, plan: QueryPlan, kind: str | None, limit: int, wanted: int,
        ranking: Ranking, now: float,
    ) -> list[Candidate]:
        """`_ranked` and `_live` of a project held in memory: the same ranking
        computed from the index's own rows (`gateway.store.fts_memory`)."""
        stems = cache.stems.of([p.text for p in plan.phrases] + ([kind] if kind else []))
        terms = [bm25.Term(stems[p.text]) if stems[p.text] else None for p in plan.phrases]
        kind_term = bm25.Term(stems[kind][:1], "C") if kind and stems[kind] else None
        kind_rows = held.column_rows(kind_term.lexemes[0], "C") if kind_term is not None else 0
        weights = column_weights(ranking)
        # A one-word phrase on every column (nearly every term of a
        # question) takes its frequencies from the held table as they are;
        # only the others (several words, or the kind column) need the
        # rows' positions.
        simple = {t for t in terms if t is not None and len(t.lexemes) == 1 and t.column is None}
        others = [t for t in terms if t is not None and t not in simple]
        weighted = {t: held.weighted(t.lexemes[0], weights) for t in simple}
        rows = held.rows_holding({t.lexemes[0] for t in others},
                                 {lex for t in others + ([kind_term] if kind_term else []) for lex in t.lexemes},
                                 (seq for per_row in weighted.values() for seq in per_row))
        if not rows:
            return []
        found, hits = frequencies(others, kind_term, rows, weights)
        for term, per_row in weighted.items():
            if per_row:
                hits[term] = len(per_row)
                for seq, f in per_row.items():
                    found[seq][term] = f

        def live(expires: float | None) -> bool:
            return expires is None or expires > now

        # The index holds trusted entries only; an expired one leaves recall
        # at once but the index only at the sweep: if they crowded the top,
        # look further down once (as `search` does).
        for attempt in range(2):
            best = ranking_of(plan, terms, kind, kind_term, rows, found, hits, held.rows, held.instances, kind_rows, wanted)
            kept = [(seq, score) for seq, score in best if live(held.expires[seq])]
            if len(kept) >= min(limit, len(best)) or len(best) < wanted or attempt:
                break
            wanted *= 8
        return [Candidate(seq, score, held.kinds[seq]) for seq, score in kept]

    @staticmethod
    def _array_ranking(
        arrays: ArrayTable, cache: PhraseCounts, plan: QueryPlan, kind: str | None, limit: int, wanted: int,
        ranking: Ranking, now: float,
    ) -> list[Candidate] | None:
        """`_ranked` and `_live` of a big project from its copy held as
        arrays (`gateway.store.bm25_arrays`), or None when a phrase needs
        FTS5.  The copy holds each row's kind and expiry as of its version."""
        from gateway.store import bm25_arrays  # numpy: imported once a copy was loaded

        stems = cache.stems.of([p.text for p in plan.phrases] + ([kind] if kind else []))
        weights = column_weights(ranking)
        ordered = (weights["A"], weights["B"], weights["C"], weights["D"])
        hits: dict[int, float] = {}
        live: dict[int, str] = {}
        for attempt in range(2):
            ranked = bm25_arrays.ranking(arrays, plan, stems, kind, ordered, wanted)
            if ranked is None:
                return None
            hits = ranked
            live = bm25_arrays.live(arrays, hits, now)
            # Expired entries leave recall at once but the index only at the
            # sweep: if they crowded the top, look further down once.
            if len(live) >= min(limit, len(hits)) or len(hits) < wanted or attempt:
                break
            wanted *= 8
        return [Candidate(seq, hits[seq], live[seq]) for seq in hits if seq in live]

    async def _ranked(
        self, project_id: int, plan: QueryPlan, kind: str | None, wanted: int, ranking: Ranking,
        known: TableCounts | None = None,
    ) -> dict[int, float]:
        """BM25 over the index alone (no join), the agent's words and their
        synonyms as two queries, fused.  In a big project the phrases that
        match thousands of rows are set aside first (`gateway.recall.search.prune`)."""
        weights = (ranking.statement_weight, ranking.evidence_weight, ranking.kind_weight, ranking.aliases_weight)
        table = self.table(project_id)
        score = f"bm25({table}, " + ", ".join(f"{float(w)!r}" for w in weights) + ")"
        ranked_sql = f"SELECT rowid AS seq, -{score} AS score FROM {table} WHERE {table} MATCH ? ORDER BY score DESC LIMIT ?"
        count_sql = f"SELECT COUNT(*) AS n FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?)"

        def scoped(expression: str) -> str:
            # A column filter on a kind that was validated against the four kinds.
            return f'kind : "{kind}" AND ({expression})' if kind is not None else expression

        async def matches(phrases: tuple[Phrase, ...]) -> int:
            expression = fts5_expression(phrases)
            if expression is None:
                return 0
            row = await self.tx.one(count_sql, scoped(expression), COMMON_ROWS + 1)
            return int(row["n"]) if row else 0

        async def run(phrases: tuple[Phrase, ...], require_all: bool = False) -> list[tuple[int, float]]:
            expression = fts5_expression(phrases, require_all=require_all)
            if expression is None:
                return []
            rows = await self.tx.all(ranked_sql, scoped(expression), wanted)
            return [(int(r["seq"]), float(r["score"])) for r in rows]

        counts: dict[str, int] | None = None
        if known is None:  # the table's kept counts, when `search` has not read them (only a reader keeps them)
            cache: PhraseCounts | None = getattr(self.tx, "phrase_counts", None)
            known = await cache.table(self.tx, table) if cache is not None else None
        if known is not None and known.rows <= wanted:
            everything, common = known.rows, False  # the whole table fits in one answer
        elif known is not None:
            # Each phrase's count, mostly from the cache (no statement but the
            # version check).  Their sum bounds the rows of the whole question.
            async def count(key: Key) -> int:
                return await matches((Phrase(key[1], prefix=key[2]),))

            keyed = {p.text: (kind, p.text, p.prefix) for p in plan.phrases}
            found = await known.counts(list(keyed.values()), count)
            counts = {text: found[key] for text, key in keyed.items()}
            everything = sum(counts.values())
            if everything == 0:
                return {}
            common = max(counts.values()) > COMMON_ROWS
        else:
            everything = await matches(plan.phrases)
            common = everything > COMMON_ROWS
        if everything <= wanted:
            # Every matching row fits in one answer, so each of the two
            # ranked lists would hold all of its rows and `fuse` would add
            # them whole: one query with the agent's words repeated
            # `original_weight` times gives the same sums (BM25 adds over
            # the query's phrases), divided by that weight.  One statement
            # instead of two: a small project, a long question.
            expression = fts5_expression(plan.phrases, repeat=True)
            assert expression is not None
            rows = await self.tx.all(ranked_sql, scoped(expression), wanted)
            weight = max(1, plan.original_weight)
            return {int(r["seq"]): float(r["score"]) / weight for r in rows}
        pruned = Pruned(plan.originals, plan.expansions, False)
        if common:
            # Setting aside changes the ranking only when some phrase matches
            # more than COMMON_ROWS rows: a phrase of no row adds nothing.
            if counts is None:
                counts = {p.text: await matches((p,)) for p in plan.phrases}
            pruned = prune(plan, counts)
        originals = await run(pruned.originals, pruned.require_all)
        if pruned.require_all and len(originals) < wanted:
            originals = await run(pruned.originals)  # too few rows hold every word: any of them
        expansions = await run(pruned.expansions) if pruned.expansions else []
        return fuse(originals, expansions, plan.original_weight)

    async def _live(self, seqs: list[int], kind: str | None, now: float) -> dict[int, str]:
        """seq -> kind of those that are trusted and unexpired right now."""
        if not seqs:
            return {}
        marks = ", ".join("?" for _ in seqs)
        sql = (
            f"SELECT seq, kind FROM entries WHERE seq IN ({marks}) "
            "AND state = 'trusted' AND (expires_at IS NULL OR expires_at > ?)"
        )
        args: list[Any] = [*seqs, now]
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        return {int(r["seq"]): str(r["kind"]) for r in await self.tx.all(sql, *args)}


def index_for(tx: Any) -> SearchIndex:
    if tx.dialect == "postgres":
        from gateway.store.search_postgres import PostgresFtsIndex

        return PostgresFtsIndex(tx)
    return SqliteFtsIndex(tx)
