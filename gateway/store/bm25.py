"""SQLite FTS5's `bm25()`, computed the same way for PostgreSQL's recall index.

Recall ranks with FTS5's BM25 on SQLite.  PostgreSQL's own `ts_rank` has no
IDF and normalises length otherwise, and its `english` configuration splits
and stems words otherwise too (`uv.lock` is one token there, two in FTS5;
"news" and "new" stem apart), so the two stores gave different answers to
the same question over the same entries.  Three things make them agree:

- the same tokens: a document is cut into FTS5 `unicode61`'s tokens (runs of
  letters and digits, lower-cased, diacritics removed) before PostgreSQL
  sees it (`document`), so its parser only ever reads plain words;
- the same stems: PostgreSQL's snowball `porter` stemmer (Martin Porter's
  original algorithm, FTS5's `porter`), with no stop words, as FTS5 keeps
  every token (`CONFIG_SQL`);
- the same score: `scores` below is FTS5's formula (k1 = 1.2, b = 0.75; a
  phrase's IDF is `log((N - n + 0.5) / (n + 0.5))`, 1e-6 when not positive;
  its frequency in a row is the sum of the column weights of its instances;
  a row's length is its number of tokens), fed with the positions the
  tsvector keeps.

Pure functions; `gateway.store.search_postgres` reads the rows.  Known
differences, all rare: FTS5's porter leaves a token of more than 64
characters alone, PostgreSQL's stems it; a tsvector keeps at most 256
positions of one word; a real word "tsss" meets "ts" (`document`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

K1 = 1.2
B = 0.75
CONFIG = "relayroom_porter"

# Created once per database (gateway.store.search_postgres.install): the
# porter stemmer for every kind of word token the parser can see in text
# that `document` made, and no stop words.
CONFIG_SQL = (
    f"CREATE TEXT SEARCH DICTIONARY {CONFIG} (TEMPLATE = snowball, LANGUAGE = porter)",
    f"CREATE TEXT SEARCH CONFIGURATION {CONFIG} (COPY = simple)",
    f"ALTER TEXT SEARCH CONFIGURATION {CONFIG} ALTER MAPPING FOR asciiword, word, numword, asciihword, hword, "
    f"numhword, hword_asciipart, hword_part, hword_numpart, int, uint, float, sfloat, version WITH {CONFIG}",
)

_TOKEN = re.compile(r"[^\W_]+")


def tokens(text: str) -> list[str]:
    """`text` as FTS5's unicode61 tokenizer (remove_diacritics 2) cuts it."""
    out = []
    for token in _TOKEN.findall(text.lower()):
        if not token.isascii():
            token = "".join(c for c in unicodedata.normalize("NFD", token) if not unicodedata.combining(c))
        if token:
            out.append(token)
    return out


def document(text: str) -> str:
    """The text PostgreSQL indexes (and stems a query's words from) for
    `text`: its FTS5 tokens, space-separated.  FTS5's porter leaves a word of
    one or two letters alone, PostgreSQL's strips a final s (`ts` would be
    `t`, the variable `T`): such a word is written with its s tripled, which
    porter keeps as it is."""
    return " ".join(t + "ss" if len(t) == 2 and t[1] == "s" and t != "ss" else t for t in tokens(text))


@dataclass(frozen=True)
class Term:
    """One phrase of the query: its lexemes in order (more than one: they
    must be adjacent, as in FTS5's `"it's"`), and the one column it is
    restricted to, if any (a tsvector weight letter)."""

    lexemes: tuple[str, ...]
    column: str | None = None
    # Terms key every dict of a ranking (a hundred lookups a question); the
    # generated hash would hash the lexemes' tuple again at each.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.lexemes, self.column)))

    def __hash__(self) -> int:
        return self._hash


@dataclass
class Row:
    """One indexed entry: `positions` of the query's lexemes, each with the
    column (weight letter) it is in; `length` in tokens."""

    seq: int
    kind: str
    length: int
    positions: dict[str, dict[int, str]] = field(default_factory=dict)
    expires_at: float | None = None


def instances(term: Term, row: Row, weights: Mapping[str, float]) -> tuple[int, float]:
    """How many times the term is in the row, and the sum of the column
    weights of those instances (FTS5's phrase frequency)."""
    first = row.positions.get(term.lexemes[0])
    if not first:
        return 0, 0.0
    if len(term.lexemes) == 1 and term.column is None:
        return len(first), sum(weights.get(column, 1.0) for column in first.values())
    rest = [row.positions.get(lex) for lex in term.lexemes[1:]]
    if any(not r for r in rest):
        return 0, 0.0
    count, total = 0, 0.0
    for position, column in first.items():
        if term.column is not None and column != term.column:
            continue
        if all((r or {}).get(position + i + 1) == column for i, r in enumerate(rest)):
            count += 1
            total += weights.get(column, 1.0)
    return count, total


def idf(rows: float, hits: float) -> float:
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else 1e-6


def scores(
    terms: Sequence[Term], rows: Iterable[Row], frequencies: Mapping[int, Mapping[Term, float]],
    table_rows: int, table_tokens: int, hits: Mapping[Term, int],
) -> dict[int, float]:
    """FTS5's bm25 of each row (those the MATCH found: a row held only in a
    column of weight 0 scores 0 and is still found), positive (FTS5 returns
    it negated), summed over `terms` in their order (a term twice counts
    twice, as a phrase repeated in a MATCH does).  `frequencies`: each row's
    weighted frequency of each term it holds (`instances`); `hits`: the rows
    of the whole table holding each term.  A row's sum is taken over the
    terms it holds only: FTS5 adds 0.0 for the others, which changes no sum,
    so a row holding three of a question's thirty terms costs three."""
    avgdl = table_tokens / table_rows if table_rows else 1.0
    places: dict[Term, list[int]] = {}
    for i, term in enumerate(terms):
        places.setdefault(term, []).append(i)
    idf_of = {t: idf(table_rows, hits.get(t, 0)) for t in places}  # a term repeated for its weight: one log
    term_idf = [idf_of[t] for t in terms]
    out: dict[int, float] = {}
    for row in rows:
        held = frequencies[row.seq]
        norm = K1 * (1 - B + B * row.length / avgdl)
        if len(held) == 1:  # most rows hold one term: its places are in order already
            [(term, f)] = held.items()
            order: Iterable[tuple[int, float]] = [(i, f) for i in places.get(term, ())]
        else:
            order = sorted((i, f) for term, f in held.items() for i in places.get(term, ()))
        score = 0.0
        for i, f in order:
            # FTS5's very expression, so that ties stay ties to the last bit.
            score += term_idf[i] * ((f * (K1 + 1.0)) / (f + norm))
        out[row.seq] = score
    return out
