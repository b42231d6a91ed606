"""The recall index on PostgreSQL: a tsvector per trusted entry, a GIN index.

Same contract as `SqliteFtsIndex`: only trusted entries are indexed, kept in
step with the state inside the transaction that moves the entry, and a search
returns `[(seq, score)]`, best first, for ANY query text.

Layout: like SQLite's, one index table per project (`recall_p<id>`: seq,
kind, expires_at, tsvector; a GIN index), created with the project, so a
project's recall reads only its own rows whatever the hub holds.  Chosen by
measurement: with 100 other projects of 2,000 entries each, one shared table
(GIN on `(project_id, tsv)` through btree_gin, or on `tsv` plus a btree on
`project_id`) made a question of common words about twice as slow (p50 3.4
-> 7.9 ms, and 5.2 -> 13.0 ms) while a table of its own stayed flat (5.5 ->
5.6 ms).  bench/recall_latency.py shows the same with the real code: search
p50 at 10k entries 5.6 ms alone, 4.9 ms in a hub with 200k other entries.

The query is the one `gateway.search.plan_query` plans for SQLite: its
phrases become tsquery lexemes (quoted, so nothing an agent typed is read as
tsquery syntax; `:*` for a prefix phrase), OR-ed.  The vector weighs the
statement (A), evidence (B), kind (C) and identifier parts (D) by the
ranking's column weights; a phrase's weight (the agent's own words count
more than synonyms) multiplies the `ts_rank` of its group; the kind-hint
boost is `gateway.search.rerank`, shared with SQLite.
"""

from __future__ import annotations

from typing import Any

from gateway.model import Entry
from gateway.search import DEFAULT_RANKING, Candidate, QueryPlan, Ranking, identifier_parts, plan_query, rerank

CONFIG = "english"
# Length normalisation 1 divides the rank by 1 + log(length): a long
# evidence text does not outrank a precise statement.
# ts_rank rather than ts_rank_cd: on bench/recall_quality.py it ranks better
# for these OR-ed queries (MRR@10 0.851 against 0.822 per project, 0.732
# against 0.678 pooled) and costs less per matching row.
RANK_FUNCTION = "ts_rank"
RANK_NORMALISATION = 1

VECTOR = (
    f"setweight(to_tsvector('{CONFIG}', ?), 'A') || "
    f"setweight(to_tsvector('{CONFIG}', ?), 'B') || "
    f"setweight(to_tsvector('{CONFIG}', ?), 'C') || "
    f"setweight(to_tsvector('{CONFIG}', ?), 'D')"
)


def table(project_id: int) -> str:
    return f"recall_p{int(project_id)}"


def lexeme(text: str, prefix: bool) -> str | None:
    """One phrase as tsquery input: a quoted lexeme (quote doubled, backslash
    escaped), so operators, colons and parentheses in it are plain text.
    None for an empty phrase, the one input tsquery would refuse."""
    if not text:
        return None
    quoted = "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
    return quoted + (":*" if prefix else "")


def rank_weights(ranking: Ranking) -> list[float]:
    """ts_rank's weights, in its order {D, C, B, A}, scaled into 0..1."""
    raw = [ranking.aliases_weight, ranking.kind_weight, ranking.evidence_weight, ranking.statement_weight]
    top = max(raw) or 1.0
    return [max(0.0, w) / top for w in raw]


def _groups(plan: QueryPlan) -> list[tuple[int, list[str]]]:
    """The plan's phrases grouped by weight, heaviest first."""
    by_weight: dict[int, list[str]] = {}
    for phrase in plan.phrases:
        quoted = lexeme(phrase.text, phrase.prefix)
        if quoted is not None:
            by_weight.setdefault(max(1, int(phrase.weight)), []).append(quoted)
    return sorted(by_weight.items(), reverse=True)


class PostgresFtsIndex:
    def __init__(self, tx: Any) -> None:
        self.tx = tx

    async def create_project(self, project_id: int) -> None:
        name = table(project_id)
        # kind and expires_at are copied from the entry (neither changes while
        # it is trusted), so a search reads this table alone.
        await self.tx.run(
            f"CREATE TABLE IF NOT EXISTS {name} "
            "(seq BIGINT PRIMARY KEY, kind TEXT NOT NULL, expires_at DOUBLE PRECISION, tsv tsvector NOT NULL)"
        )
        await self.tx.run(f"CREATE INDEX IF NOT EXISTS {name}_tsv ON {name} USING gin (tsv)")

    async def add(self, entry: Entry) -> None:
        evidence = entry.evidence or ""
        await self.tx.run(
            f"INSERT INTO {table(entry.project_id)} (seq, kind, expires_at, tsv) VALUES (?, ?, ?, {VECTOR}) "
            "ON CONFLICT (seq) DO UPDATE SET kind = excluded.kind, expires_at = excluded.expires_at, tsv = excluded.tsv",
            entry.seq,
            entry.kind,
            entry.expires_at,
            entry.statement,
            evidence,
            entry.kind,
            identifier_parts(f"{entry.statement} {evidence}"),
        )

    async def remove(self, entry: Entry) -> None:
        await self.tx.run(f"DELETE FROM {table(entry.project_id)} WHERE seq = ?", entry.seq)

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
        groups = _groups(plan)
        if not groups:
            return []
        args: list[Any] = [rank_weights(ranking)]
        columns = []
        for n, (_, lexemes) in enumerate(groups):
            columns.append(" || ".join([f"to_tsquery('{CONFIG}', ?)"] * len(lexemes)) + f" AS q{n}")
            args.extend(lexemes)
        score = " + ".join(
            f"{weight} * {RANK_FUNCTION}(q.w, r.tsv, q.q{n}, {RANK_NORMALISATION})" for n, (weight, _) in enumerate(groups)
        )
        matches = " || ".join(f"q.q{n}" for n in range(len(groups)))
        sql = (
            f"WITH q AS (SELECT CAST(? AS REAL[]) AS w, {', '.join(columns)}) "
            f"SELECT r.seq AS seq, r.kind AS kind, ({score}) AS score "
            f"FROM q, {table(project_id)} r "
            f"WHERE r.tsv @@ ({matches}) AND (r.expires_at IS NULL OR r.expires_at > ?)"
        )
        args.append(float(now))
        if kind is not None:
            sql += " AND r.kind = ?"
            args.append(kind)
        sql += " ORDER BY score DESC, r.seq DESC LIMIT ?"
        # A few more candidates than asked, as on SQLite, so the kind-hint
        # boost can lift an entry ranked just below the cut.
        args.append(max(limit, min(ranking.candidates, limit * 3)))
        rows = await self.tx.all(sql, *args)
        candidates = [Candidate(int(r["seq"]), float(r["score"]), str(r["kind"])) for r in rows]
        return rerank(candidates, plan, ranking, limit)
