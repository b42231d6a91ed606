"""Prefix phrases on PostgreSQL: ranked by `ts_rank` over a candidate set.

Recall's own ranking has no prefix phrases (`Ranking.prefix`, see
`gateway.recall.search`): `gateway.store.search_postgres` ranks it as FTS5
does.  A ranking that asks for prefixes (the evaluation ladder's "+prefix"
step, bench/recall_quality.py) is the one exception, as it was for small
projects too: its rows are ranked by `ts_rank` (its weights the ranking's
column weights, a phrase group's weight multiplying its rank) over a
candidate set chosen from the table's own statistics (`estimate`, `select`):
a table of up to `CANDIDATE_ROWS` rows, or a question whose rows the
statistics put at no more, is ranked whole; otherwise the rows holding its
rarest phrases, and when none of the agent's words is rare, the rows holding
all of them and those of the newest `RECENT_ROWS` rows that hold any.  The
tsqueries are built once per statement (a MATERIALIZED CTE); the table's
statistics are cached per process and checked by the search's own first
statement (`TableStats`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from gateway.recall.search import Candidate, Phrase, QueryPlan, Ranking
from gateway.store import bm25
from gateway.store.pg_tsquery import lexeme, tsquery_text

CONFIG = bm25.CONFIG
# Length normalisation 1 divides the rank by 1 + log(length): a long
# evidence text does not outrank a precise statement.
# ts_rank rather than ts_rank_cd: on bench/recall_quality.py it ranks better
# for these OR-ed queries (MRR@10 0.851 against 0.822 per project, 0.732
# against 0.678 pooled) and costs less per matching row.
RANK_FUNCTION = "ts_rank"
RANK_NORMALISATION = 1
# About this many rows (estimated) are ranked by ts_rank in one search
# (1000: as fast or faster than 2000 or 3000, and it ranked the padded
# evaluation as well or better); a table of at most this many rows is
# ranked whole.
CANDIDATE_ROWS = 1000
# When every word the agent typed is common: how many of the project's
# newest rows are read for those that hold any of them.
RECENT_ROWS = 500


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


# What a search needs to know before it picks its rows, cached per process
# per (database, table) (`TableStats`, `_table_stats`):
#
# - `rows`: the table's rows, from pg_class.reltuples (-1 before its first
#   VACUUM or ANALYZE).  A table of up to CANDIDATE_ROWS rows, or one never
#   analyzed, is ranked whole; nothing below is read for it.
# - `shares`: the statistics ANALYZE keeps for the tsvector column: the share
#   of rows holding each of its ~1000 most common lexemes, a sample that
#   autovacuum refreshes as the table grows.  A lexeme missing from that
#   list is rarer than the rarest listed one: like the planner, count it at
#   half that share (`unlisted`).
#
# Reading them costs about 0.2 ms of a statement (pg_stats, and its array of
# lexemes cast to text[]) that every search of a big table paid.  Cached,
# they are checked instead: the first statement of a search also returns the
# table's `token` (its oid, reltuples and how many times it was analyzed,
# microseconds to read), and when that is not the token of the cached
# statistics (a VACUUM or ANALYZE ran since), they are read again and the
# search starts over with them; so a search picks its rows from the
# statistics it would have read itself.  STATS_SECONDS bounds how long a
# cached answer is trusted at all (an ANALYZE that commits while they are
# read could leave a token newer than the statistics).  The cache is keyed
# by the driver's `cache_key` (the database's URL and oid); without one (a
# Tx made outside the driver) nothing is cached.
STATS_SECONDS = 60.0
STATS_TABLES = 512  # tables whose statistics are held at most (the oldest go first)
STEMS = 20_000  # phrases whose lexemes are held at most

TOKEN = (
    "(SELECT COALESCE(MAX(CONCAT(c.oid, ':', c.reltuples, ':', "
    "pg_stat_get_analyze_count(c.oid) + pg_stat_get_autoanalyze_count(c.oid))), '') "
    "FROM pg_class c WHERE c.oid = to_regclass(?))"
)
STATS_SQL = (
    "WITH size AS MATERIALIZED (SELECT COALESCE(MAX(c.reltuples), -1) AS n FROM pg_class c WHERE c.oid = to_regclass(?)) "
    f"SELECT size.n AS n, {TOKEN} AS token, st.elems AS elems, st.freqs AS freqs FROM size LEFT JOIN LATERAL ("
    "SELECT CAST(CAST(s.most_common_elems AS TEXT) AS TEXT[]) AS elems, s.most_common_elem_freqs AS freqs "
    f"FROM pg_stats s WHERE size.n > {int(CANDIDATE_ROWS)} AND s.schemaname = current_schema() "
    "AND s.tablename = ? AND s.attname = 'tsv') st ON true"
)
# A phrase's lexemes as the index stems them ("it's" holds two; stop words
# none), and the table's token.
STEMS_SQL = (
    f"SELECT u.i AS i, tsvector_to_array(to_tsvector('{CONFIG}', u.phrase)) AS lexemes, {TOKEN} AS token "
    "FROM unnest(CAST(? AS TEXT[])) WITH ORDINALITY AS u(phrase, i)"
)


@dataclass(frozen=True)
class TableStats:
    rows: float  # pg_class.reltuples; -1 before the first VACUUM or ANALYZE
    token: str  # what changes when a VACUUM or ANALYZE changes the above ('' for no such table)
    shares: dict[str, float] | None  # lexeme -> share of rows holding it; None: no statistics (or not read)
    unlisted: float = 0.0  # the share counted for a lexeme not in `shares`


_clock = time.monotonic
_stats: dict[tuple[str, str], tuple[float, TableStats]] = {}
_stems: dict[tuple[str, str], tuple[str, ...]] = {}


def forget() -> None:
    """Drop every cached statistic and stem (tests; nothing else needs to)."""
    _stats.clear()
    _stems.clear()


def _remember(cache: dict[Any, Any], key: Any, value: Any, most: int) -> None:
    cache.pop(key, None)
    if len(cache) >= most:
        cache.pop(next(iter(cache)), None)  # the oldest entry
    cache[key] = value


async def _table_stats(tx: Any, name: str, *, cached: bool = True) -> tuple[TableStats, bool]:
    """The table's statistics, and whether they were read just now (False:
    from the cache, to be checked against the table's token)."""
    key = getattr(tx, "cache_key", None)
    now = _clock()
    if cached and key is not None:
        hit = _stats.get((key, name))
        if hit is not None and hit[0] > now:
            return hit[1], False
    row = await tx.one(STATS_SQL, name, name, name)
    assert row is not None
    rows, token, elems, freqs = float(row["n"]), str(row["token"]), row["elems"], row["freqs"]
    stats = TableStats(rows, token, None)
    # The frequencies list one share per lexeme, then the smallest and the
    # largest of them.
    if elems is not None and freqs is not None and len(freqs) > len(elems):
        stats = TableStats(rows, token, dict(zip(elems, (float(f) for f in freqs))), float(freqs[len(elems)]) / 2)
    if key is not None:
        _remember(_stats, (key, name), (now + STATS_SECONDS, stats), STATS_TABLES)
    return stats, True


async def _lexemes(tx: Any, texts: Sequence[str], name: str) -> tuple[dict[str, tuple[str, ...]], str | None]:
    """Each text's lexemes, as `to_tsvector` gives them (cached per database:
    stemming depends on the server's dictionaries alone), and the token of
    table `name` when a statement had to be run (None when every text was
    cached)."""
    key = getattr(tx, "cache_key", None)
    found: dict[str, tuple[str, ...]] = {}
    missing: list[str] = []
    for text in texts:
        hit = _stems.get((key, text)) if key is not None else None
        if hit is not None:
            found[text] = hit
        elif text not in missing:
            missing.append(text)
    if not missing:
        return found, None
    token = None
    for row in await tx.all(STEMS_SQL, name, [bm25.document(text) for text in missing]):
        lexemes = tuple(row["lexemes"] or ())
        text = missing[int(row["i"]) - 1]
        found[text] = lexemes
        token = str(row["token"])
        if key is not None:
            _remember(_stems, (key, text), lexemes, STEMS)
    return found, token


def estimate(
    phrases: Sequence[Phrase], lexemes: dict[str, tuple[str, ...]], stats: TableStats, budget: int | None = None
) -> dict[str, float] | None:
    """The estimated rows holding each phrase, or None to rank every
    matching row: the table is small, has no statistics yet, or the phrases
    together hold at most `budget` rows.  A phrase matches at most as often
    as its rarest lexeme; one of stop words only, never.  The arithmetic is
    the SQL's this replaced (shares widened from real to double, summed in
    the phrases' order, times the table's rows)."""
    budget = CANDIDATE_ROWS if budget is None else budget
    if stats.rows <= budget or stats.shares is None:
        return None
    shares = stats.shares
    each: list[tuple[str, float]] = []
    for phrase in phrases:
        held = lexemes.get(phrase.text, ())
        each.append((phrase.text, min(shares.get(lex, stats.unlisted) for lex in held) if held else 0.0))
    if sum(share for _, share in each) * stats.rows <= budget:
        return None
    return {text: share * stats.rows for text, share in each}


@dataclass(frozen=True)
class Selection:
    """Which rows a search over a big project ranks."""

    rare: tuple[Phrase, ...]  # the rows holding any of these
    common: tuple[Phrase, ...]  # the agent's words left out (or, if none, the synonyms), rarest first
    every: bool  # also the rows holding every one of `common` (they are few enough)
    now: bool  # rank the rows of `common` at once: no word of the agent's is in `rare`


def select(
    phrases: Sequence[Phrase], rows: dict[str, float], table_rows: float, budget: int | None = None
) -> Selection | None:
    """The candidate set, or None to rank every matching row (they are few).
    `rows`: the estimated rows holding each phrase, of `table_rows`."""
    budget = CANDIDATE_ROWS if budget is None else budget
    if sum(rows.values()) <= budget:
        return None
    matching = [p for p in phrases if rows.get(p.text, 0.0) > 0]
    rare: list[Phrase] = []
    total = 0.0
    # Rarest first per unit of weight: an original word (weight 4) may bring
    # in four times the rows of a synonym.
    for phrase in sorted(matching, key=lambda p: (rows[p.text] / max(1, p.weight), p.expansion)):
        if total + rows[phrase.text] <= budget:
            total += rows[phrase.text]
            rare.append(phrase)
    left = [p for p in matching if p not in rare]
    common = [p for p in left if not p.expansion] or left
    common.sort(key=lambda p: rows[p.text])
    # Words taken as independent: the rows holding all of them.
    together = table_rows
    for phrase in common:
        together *= rows[phrase.text] / max(1.0, table_rows)
    every = len(common) > 1 and together <= budget
    return Selection(tuple(rare), tuple(common), every, not any(not p.expansion for p in rare))


def below(more: list[Candidate], ranked: list[Candidate]) -> list[Candidate]:
    """`more`, in its order, with its scores scaled under the lowest score of
    `ranked`: rows that hold only common words come after every row that
    holds a rare one (`ts_rank` has no IDF to say so itself)."""
    if not more or not ranked:
        return more
    floor, top = min(c.score for c in ranked), max(c.score for c in more)
    if top < floor:
        return more
    scale = floor / top * 0.999 if floor > 0 and top > 0 else 0.0
    return [c._replace(score=c.score * scale) for c in more]


Branch = tuple[str, list[Any]]


class _Ranked:
    """The statements of one search: the query's tsqueries, built once
    (MATERIALIZED: in the generic plan PostgreSQL switches a prepared
    statement to after five runs, `to_tsquery(...)` in the score was
    otherwise parsed again for every row), and the score, over whichever
    candidate rows a branch picks."""

    def __init__(self, name: str, groups: list[tuple[int, list[str]]], ranking: Ranking, kind: str | None, now: float) -> None:
        self.name = name
        columns = ", ".join(f"to_tsquery('{CONFIG}', ?) AS q{n}" for n in range(len(groups)))
        self.head_args: list[Any] = [rank_weights(ranking), *(" | ".join(lexemes) for _, lexemes in groups)]
        self.head = f"WITH q AS MATERIALIZED (SELECT CAST(? AS REAL[]) AS w, {columns})"
        self.score = " + ".join(
            f"{weight} * {RANK_FUNCTION}(q.w, r.tsv, q.q{n}, {RANK_NORMALISATION})" for n, (weight, _) in enumerate(groups)
        )
        self.any_group = "r.tsv @@ (" + " || ".join(f"q.q{n}" for n in range(len(groups))) + ")"
        self.live = "(r.expires_at IS NULL OR r.expires_at > ?)"
        self.live_args: list[Any] = [float(now)]
        if kind is not None:
            self.live += " AND r.kind = ?"
            self.live_args.append(kind)

    def _branch(self, source: str, where: str, args: list[Any]) -> Branch:
        return f"SELECT r.seq AS seq, r.kind AS kind, ({self.score}) AS score FROM q, {source} WHERE {where}", args

    def matching(self) -> Branch:
        """Every row matching the query."""
        return self._branch(f"{self.name} r", f"{self.any_group} AND {self.live}", list(self.live_args))

    def holding(self, phrases: Sequence[Phrase], every: bool = False) -> Branch:
        """The rows holding any (or every) one of `phrases`."""
        where = f"r.tsv @@ to_tsquery('{CONFIG}', ?) AND {self.live}"
        return self._branch(f"{self.name} r", where, [tsquery_text(phrases, "&" if every else "|"), *self.live_args])

    def recent(self, phrases: Sequence[Phrase]) -> Branch:
        """Those of the project's newest `RECENT_ROWS` rows that hold any of
        `phrases`: a backward scan of the primary key that reads that many
        rows whatever the words."""
        source = f"(SELECT r.seq, r.kind, r.tsv, r.expires_at FROM {self.name} r ORDER BY r.seq DESC LIMIT {int(RECENT_ROWS)}) r"
        where = f"r.tsv @@ to_tsquery('{CONFIG}', ?) AND {self.live}"
        return self._branch(source, where, [tsquery_text(phrases), *self.live_args])

    async def best(self, tx: Any, branches: list[Branch], wanted: int) -> list[Candidate]:
        """The `wanted` best rows of the branches' rows, best first."""
        return (await self.best_and_token(tx, branches, wanted, token=False))[0]

    async def best_and_token(
        self, tx: Any, branches: list[Branch], wanted: int, *, token: bool = True
    ) -> tuple[list[Candidate], str | None]:
        """`best`, and (token=True) the table's token from the same statement
        (None when there was no statement to run)."""
        if not branches:
            return [], None
        ranked = " UNION ".join(f"({b})" if len(branches) > 1 else b for b, _ in branches)
        ranked += " ORDER BY score DESC, seq DESC LIMIT ?"
        args = [*self.head_args, *(a for _, branch_args in branches for a in branch_args), wanted]
        if token:
            # One more row: the token (never a ranked row: its seq is NULL).
            ranked = f"SELECT best.*, NULL AS token FROM ({ranked}) best UNION ALL SELECT NULL, NULL, NULL, {TOKEN}"
            args.append(self.name)
        rows = await tx.all(f"{self.head} {ranked}", *args)
        found = [Candidate(int(r["seq"]), float(r["score"]), str(r["kind"])) for r in rows if r["seq"] is not None]
        return found, next((str(r["token"]) for r in rows if r["seq"] is None), None) if token else None


async def prefix_ranking(
    tx: Any, name: str, plan: QueryPlan, phrases: tuple[Phrase, ...], ranking: Ranking, kind: str | None,
    wanted: int, now: float,
) -> list[Candidate]:
    """The `wanted` best rows of index table `name` for a question with
    prefix phrases (`phrases`: the plan's that hold a word), best first."""
    ranked = _Ranked(name, _groups(plan), ranking, kind, now)
    stats, current = await _table_stats(tx, ranked.name)
    found = await _candidates(tx, ranked, phrases, stats, None if current else stats.token, wanted)
    if found is None:  # the cached statistics are out of date: read them, start over
        stats, _ = await _table_stats(tx, ranked.name, cached=False)
        found = await _candidates(tx, ranked, phrases, stats, None, wanted)
    assert found is not None
    return found


async def _candidates(
    tx: Any, ranked: _Ranked, phrases: tuple[Phrase, ...], stats: TableStats, expected: str | None, wanted: int
) -> list[Candidate] | None:
    """The candidates, picked with `stats`; None if `expected` (the token
    of cached statistics, None once checked) is not the table's token."""

    def stale(token: str | None) -> bool:
        nonlocal expected
        if token is None or expected is None:
            return False
        if token != expected:
            return True
        expected = None  # checked
        return False

    estimates = None
    if stats.rows > CANDIDATE_ROWS and stats.shares is not None:
        lexemes, token = await _lexemes(tx, [p.text for p in phrases], ranked.name)
        if stale(token):
            return None
        estimates = estimate(phrases, lexemes, stats)
    selection = select(phrases, estimates, stats.rows) if estimates is not None else None
    if selection is None:  # a small table, few matching rows, or no statistics yet: rank them all
        every = [ranked.matching()]
        candidates, token = await ranked.best_and_token(tx, every, wanted, token=expected is not None)
        return None if stale(token) else candidates
    branches = [ranked.holding(selection.rare)] if selection.rare else []
    common: list[Branch] = []
    if selection.common:
        if selection.every:
            common.append(ranked.holding(selection.common, every=True))
        common.append(ranked.recent(selection.common))
    if selection.now:
        branches += common
        common = []
    candidates, token = await ranked.best_and_token(tx, branches, wanted, token=expected is not None)
    if stale(token):
        return None
    if common and len(candidates) < wanted:
        # The rare words held fewer rows than estimated (a word missing
        # from the statistics may hold none): fill up with the rows of
        # the common ones, ranked below every row that holds a rare word.
        seen = {c.seq for c in candidates}
        more = [c for c in await ranked.best(tx, common, wanted) if c.seq not in seen]
        candidates += below(more, candidates)[: wanted - len(candidates)]
    return candidates
