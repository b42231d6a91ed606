"""SQLite's recall ranking of a big project, computed with numpy arrays.

A project past `HELD_ROWS` entries is ranked by FTS5 statements
(`SqliteFtsIndex._ranked`): at 10,000 entries those two statements were
three quarters of a recall's server time, because FTS5's `bm25()` reads
every matched row's sizes and sums its score one row at a time.  This is
the same ranking computed from a copy of the index held as arrays
(`gateway.store.fts_arrays` loads it): each term's rows and its part of
their score are worked out once per version of the index, and a question
adds a few arrays.

"The same ranking" to the last bit where it can be: the same phrases, the
same choice between one ranking and two fused ones, the same phrases set
aside as common (`gateway.recall.search.prune`), each row's score summed
over the phrases in the order FTS5 sums them, with FTS5's own expression
(`gateway.store.bm25`).  Tests hold it equal to FTS5's statements on the
same file (tests/unit/recall/test_recall_arrays.py).  A phrase this copy
cannot rank (several tokens that must stand together, a prefix) leaves the
question to FTS5 (`ranking` returns None).

Pure: arrays in, (seq, score) out; nothing here reads the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from gateway.recall.search import COMMON_ROWS, Pruned, QueryPlan, fuse, prune
from gateway.store import bm25

COLUMN_BITS = 2  # an instance is (row << 2) | column: the four columns of the index
MAX_KEPT_TERMS = 20_000  # per copy: (lexeme, column, weights) whose rows and parts are kept


@dataclass
class Pairs:
    """Every (stem, row) of a copy with the stem's weighted frequency in the
    row and its part of the row's score, for one set of column weights:
    worked out for the whole copy at once when it is loaded, so a
    question's stems are slices, however new they are to the process."""

    weights: tuple[float, ...]
    offsets: list[int]  # stem ordinal -> its pairs are [offsets[i], offsets[i + 1])
    rows: np.ndarray  # int64
    frequency: np.ndarray  # float64
    parts: np.ndarray  # float64


@dataclass
class ArrayTable:
    """One version of one index table: its rows in `seq` order, and for
    each stem the slice of `instances` that holds it (row-major within
    the stem, as FTS5's `fts5vocab` lists them)."""

    version: bytes
    seqs: np.ndarray  # int64, ascending: a row's place in every other array
    lengths: np.ndarray  # float64: each row's tokens over all columns (FTS5's row size)
    kinds: list[str]  # each row's entry kind
    expires: np.ndarray  # float64: each row's expiry, +inf when none
    instances: np.ndarray  # int64: (row << COLUMN_BITS) | column, grouped by stem
    stems: dict[str, int]  # stem -> its ordinal: its instances are [offsets[i], offsets[i + 1])
    offsets: list[int]
    pairs: Pairs | None = None
    _terms: dict[tuple[str, int | None, tuple[float, ...]], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False)
    _parts: dict[tuple[str, int | None, tuple[float, ...]], np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def rows(self) -> int:
        return len(self.seqs)

    @property
    def tokens(self) -> int:
        return len(self.instances)

    @property
    def nbytes(self) -> int:
        """What the copy's arrays take (the bound of `gateway.store.fts_arrays`)."""
        arrays = [self.seqs, self.lengths, self.expires, self.instances]
        if self.pairs is not None:
            arrays += [self.pairs.rows, self.pairs.frequency, self.pairs.parts]
        return sum(a.nbytes for a in arrays) + 8 * (len(self.offsets) + len(self.kinds))

    def _paired(self, lexeme: str, column: int | None, weights: tuple[float, ...], *,
                parts: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """The stem's slice of `pairs` (its rows, and their frequencies or
        score parts), or None when the pairs were worked out for other
        weights, or the term is one column's."""
        pairs = self.pairs
        if column is not None or pairs is None or weights != pairs.weights:
            return None
        i = self.stems.get(lexeme)
        if i is None:
            return _EMPTY
        a, b = pairs.offsets[i], pairs.offsets[i + 1]
        return pairs.rows[a:b], (pairs.parts if parts else pairs.frequency)[a:b]

    def holding(self, lexeme: str, column: int | None, weights: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding `lexeme` (in `column` only, if given), and in
        each the sum of the column weights of its instances (FTS5's phrase
        frequency), summed in the order FTS5 adds them."""
        paired = self._paired(lexeme, column, weights, parts=False)
        if paired is not None:
            return paired
        key = (lexeme, column, weights)
        found = self._terms.get(key)
        if found is not None:
            return found
        i = self.stems.get(lexeme)
        if i is None:
            found = _EMPTY
        else:
            block = self.instances[self.offsets[i]:self.offsets[i + 1]]
            columns = block & ((1 << COLUMN_BITS) - 1)
            if column is not None:
                block = block[columns == column]
                columns = columns[columns == column]
            rows = block >> COLUMN_BITS
            if len(rows):
                starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
                found = (rows[starts], np.add.reduceat(np.asarray(weights)[columns], starts))
            else:
                found = _EMPTY
        if len(self._terms) >= MAX_KEPT_TERMS:
            self._terms.clear()
            self._parts.clear()
        self._terms[key] = found
        return found

    def parts(self, lexeme: str, column: int | None, weights: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding the term and its part of each one's score
        (`bm25.scores` for one term: its IDF over the whole table, all
        kinds).  Fixed for a version, so worked out once."""
        paired = self._paired(lexeme, column, weights, parts=True)
        if paired is not None:
            return paired
        rows, frequency = self.holding(lexeme, column, weights)
        key = (lexeme, column, weights)
        found = self._parts.get(key)
        if found is None:
            found = self._parts[key] = _score_parts(self, rows, frequency, bm25.idf(self.rows, len(rows)))
        return rows, found


_EMPTY = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))


def _score_parts(table: ArrayTable, rows: np.ndarray, frequency: np.ndarray, idf: np.ndarray | float) -> np.ndarray:
    """`bm25.scores`' expression for one term, row by row, in its order of operations."""
    avgdl = table.tokens / table.rows if table.rows else 1.0
    norm = bm25.K1 * (1 - bm25.B + bm25.B * table.lengths[rows] / avgdl)
    return idf * ((frequency * (bm25.K1 + 1.0)) / (frequency + norm))


def with_pairs(table: ArrayTable, weights: tuple[float, ...], rows_per_stem: np.ndarray | None = None) -> ArrayTable:
    """`table` with its `Pairs` for `weights`, all stems at once.
    `rows_per_stem`, if given, is what the index says each stem's rows
    are: a copy that disagrees is refused (ValueError)."""
    offsets = np.asarray(table.offsets, dtype=np.int64)
    counts = offsets[1:] - offsets[:-1]
    stem = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    rows = table.instances >> COLUMN_BITS
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (rows[1:] != rows[:-1]) | (stem[1:] != stem[:-1])
    starts = np.flatnonzero(new)
    pair_rows, pair_stem = rows[starts], stem[starts]
    frequency = (np.add.reduceat(np.asarray(weights)[table.instances & ((1 << COLUMN_BITS) - 1)], starts)
                 if len(starts) else np.empty(0, dtype=np.float64))
    per_stem = np.bincount(pair_stem, minlength=len(counts))
    if rows_per_stem is not None and not np.array_equal(per_stem, rows_per_stem):
        raise ValueError("the stems' rows disagree with the index")
    # math.log, as `bm25.scores` takes it: numpy's own log may differ in the last bit.
    idf = np.array([bm25.idf(table.rows, n) for n in per_stem.tolist()], dtype=np.float64)
    table.pairs = Pairs(
        weights=weights,
        offsets=[0, *np.cumsum(per_stem).tolist()],
        rows=pair_rows,
        frequency=frequency,
        parts=_score_parts(table, pair_rows, frequency, idf[pair_stem]),
    )
    return table


def live(table: ArrayTable, seqs: Iterable[int], now: float) -> dict[int, str]:
    """seq -> kind of those of `seqs` unexpired at `now` (the copy holds
    trusted entries only, and each one's expiry as of its version)."""
    seqs = list(seqs)
    places = np.searchsorted(table.seqs, np.fromiter(seqs, dtype=np.int64, count=len(seqs)))
    unexpired = (table.expires[places] > now).tolist()
    return {seq: table.kinds[place] for seq, place, keep in zip(seqs, places.tolist(), unexpired) if keep}


class Term(NamedTuple):
    """A phrase as this copy ranks it: one stem, on every column or one."""

    lexeme: str
    column: int | None = None


def _best(table: ArrayTable, score: np.ndarray, found: np.ndarray, wanted: int) -> list[tuple[int, float]]:
    """The `wanted` best of the rows `found`, best first, ties by seq."""
    if len(found) > wanted:
        scored = score[found]
        cut = np.partition(scored, len(scored) - wanted)[len(scored) - wanted]
        found = found[scored >= cut]
    best = sorted(zip((-score[found]).tolist(), table.seqs[found].tolist()))[:wanted]
    return [(seq, -negative) for negative, seq in best]


def ranking(
    table: ArrayTable,
    plan: QueryPlan,
    stems: dict[str, tuple[str, ...]],
    kind: str | None,
    weights: tuple[float, float, float, float],
    wanted: int,
) -> dict[int, float] | None:
    """What `SqliteFtsIndex._ranked` returns for `plan` on this version of
    the index, or None if a phrase needs FTS5 (several tokens, a prefix).
    `stems`: each phrase's (and the kind's) stems as the index cuts them."""
    terms: dict[str, Term | None] = {}
    for phrase in plan.phrases:
        lexemes = stems.get(phrase.text, ())
        if phrase.prefix or len(lexemes) > 1:
            return None
        terms[phrase.text] = Term(lexemes[0]) if lexemes else None  # no token: matches no row
    head: list[Term] = []
    scope: np.ndarray | None = None
    if kind is not None:
        kind_stems = stems.get(kind, ())
        if not kind_stems:
            return {}
        # `kind : "x" AND (...)`: a phrase of the kind column, first in the sum.
        head = [Term(kind_stems[0], 2)]
        scope = np.zeros(table.rows, dtype=bool)
        scope[table.holding(kind_stems[0], 2, weights)[0]] = True

    def part(term: Term) -> tuple[np.ndarray, np.ndarray]:
        return table.parts(term.lexeme, term.column, weights)

    def matching(term: Term | None) -> int:
        if term is None:
            return 0
        rows = table.holding(term.lexeme, term.column, weights)[0]
        return int(np.count_nonzero(scope[rows])) if scope is not None else len(rows)

    def ranked(phrase_terms: Sequence[Term | None], limit: int, require_all: bool = False) -> list[tuple[int, float]]:
        """FTS5's `bm25` of `head + phrase_terms`, over the rows matching any
        (or every) one of them in the scope, best `limit` first."""
        present = [t for t in phrase_terms if t is not None]
        if not present or (require_all and len(present) < len(phrase_terms)):
            return []
        distinct = list(dict.fromkeys(present))
        held = np.bincount(np.concatenate([part(t)[0] for t in distinct]), minlength=table.rows)
        if scope is not None:
            held[~scope] = 0
        found = np.flatnonzero(held >= (len(distinct) if require_all else 1))
        if not len(found):
            return []
        # bincount adds each row's parts in the order given, from 0.0: the
        # phrases' order, as FTS5 sums them.
        summed = [part(t) for t in head + present]
        score = np.bincount(np.concatenate([rows for rows, _ in summed]),
                            weights=np.concatenate([values for _, values in summed]), minlength=table.rows)
        return _best(table, score, found, limit)

    if table.rows <= wanted:
        everything, common, counts = table.rows, False, None
    else:
        counts = {text: matching(term) for text, term in terms.items()}
        everything = sum(counts.values())
        if everything == 0:
            return {}
        common = max(counts.values()) > COMMON_ROWS
    if everything <= wanted:
        # One ranking, each phrase repeated its weight (as FTS5's
        # `fts5_expression(..., repeat=True)`), divided by the agents' weight.
        repeated = [terms[p.text] for p in plan.phrases for _ in range(max(1, p.weight))]
        weight = max(1, plan.original_weight)
        return {seq: score / weight for seq, score in ranked(repeated, wanted)}
    pruned = Pruned(plan.originals, plan.expansions, False)
    if common:
        assert counts is not None
        pruned = prune(plan, counts)
    originals = ranked([terms[p.text] for p in pruned.originals], wanted, pruned.require_all)
    if pruned.require_all and len(originals) < wanted:
        originals = ranked([terms[p.text] for p in pruned.originals], wanted)
    expansions = ranked([terms[p.text] for p in pruned.expansions], wanted) if pruned.expansions else []
    return fuse(originals, expansions, plan.original_weight)
