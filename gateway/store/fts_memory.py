"""A small project's FTS5 index held in memory, ranked in Python as FTS5 ranks it.

Why: most projects are small, and agents ask in sentences.  A question of
about fifteen words becomes some thirty phrases, the agent's own words
written four times (their weight, `gateway.recall.search.fts5_expression`),
and FTS5 runs a pass over the index per phrase and calls `bm25()` per row
with all of them: on a project of 30 entries that one statement was about
a third of a recall's server time, and a recall's largest part.  In Python,
over the few rows the question's words are in, the same score costs a
fraction of that.

What is held, per version of an index table (the structure record that
`gateway.store.fts_counts` reads: it changes with every committed change,
so a held copy is never stale): every token instance the index keeps
(FTS5's own `fts5vocab` table, type `instance`: stem, row, column,
offset), and each row's kind and expiry.  The question's words are cut and
stemmed by FTS5's own tokenizer too, in a private in-memory database
(`Stems`), so the stems are SQLite's by construction, not a port of its
porter stemmer.  The ranking itself is `gateway.store.bm25_ranking`, the
same function PostgreSQL's small projects use; tests hold both equal to
FTS5's statements on the same rows (tests/unit/recall/test_recall_memory.py).

Only tables of at most `HELD_ROWS` rows are held (a bigger one is ranked
by FTS5 with its pruning), and at most `HELD_INSTANCES` token instances
over all tables of one process: past that the held copies are dropped and
loaded again when asked for.
"""

from __future__ import annotations

import sqlite3
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterable

from gateway.store import bm25

TOKENIZE = "porter unicode61 remove_diacritics 2"  # the recall index's tokenizer, for its tables and for questions
HELD_ROWS = 300
HELD_INSTANCES = 1_000_000
MAX_STEMS = 50_000
MAX_KEPT_CHARS = 64  # a longer word is stemmed each time it is asked (the cache's size stays bounded)

# FTS5's columns, in their order, as the weight letters of `gateway.store.bm25`
# (statement A, evidence B, kind C, identifier parts D).  An instance is kept
# as one 64-bit integer, row << 26 | column << 24 | offset: offsets count
# from 0 in every column, so column << 24 | offset is a position unique in
# the row, adjacent where the tokens are adjacent within one column.
COLUMNS = ("statement", "evidence", "kind", "aliases")
LETTERS = "ABCD"
_COLUMN = {name: i for i, name in enumerate(COLUMNS)}
_ROW_SHIFT = 26
_POSITION = (1 << _ROW_SHIFT) - 1  # (a statement is far shorter than 2**24 tokens)


@dataclass
class HeldTable:
    """One version of one index table: its rows and where each stem stands."""

    rows: int = 0
    lengths: dict[int, int] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)
    expires: dict[int, float | None] = field(default_factory=dict)
    postings: dict[str, array] = field(default_factory=dict)  # stem -> its instances, packed
    instances: int = 0  # all columns: the total length BM25 divides by, and what the process-wide bound counts
    # (stem, column weights) -> row -> the stem's weighted frequency in it:
    # at most one number per instance held, per ranking asked for.
    _weighted: dict[tuple[str, tuple[tuple[str, float], ...]], dict[int, float]] = field(default_factory=dict)

    def weighted(self, lexeme: str, weights: dict[str, float]) -> dict[int, float]:
        """Each row holding `lexeme` -> the sum of the column weights of its
        instances, in the order of the postings: what `bm25.instances` gives
        a one-word phrase, the same float, without building the row's
        positions for each question."""
        instances = self.postings.get(lexeme)
        if not instances:
            return {}
        key = (lexeme, tuple(sorted(weights.items())))
        found = self._weighted.get(key)
        if found is None:
            columns: dict[int, list[str]] = {}
            for packed in instances:
                columns.setdefault(packed >> _ROW_SHIFT, []).append(LETTERS[(packed & _POSITION) >> 24])
            found = self._weighted[key] = {seq: sum(weights.get(c, 1.0) for c in held) for seq, held in columns.items()}
        return found

    def rows_holding(self, lexemes: Iterable[str], positions: Iterable[str], seqs: Iterable[int] = ()) -> list[bm25.Row]:
        """The rows holding any of `lexemes` (and the rows `seqs`), each with
        where each of `positions` (lexemes too) stands in it."""
        out: dict[int, bm25.Row] = {}
        for seq in seqs:
            if seq not in out:
                out[seq] = bm25.Row(seq, self.kinds[seq], self.lengths[seq], {}, self.expires[seq])
        for lexeme in lexemes:
            for packed in self.postings.get(lexeme, ()):
                seq = packed >> _ROW_SHIFT
                if seq not in out:
                    out[seq] = bm25.Row(seq, self.kinds[seq], self.lengths[seq], {}, self.expires[seq])
        for lexeme in positions:
            for packed in self.postings.get(lexeme, ()):
                row = out.get(packed >> _ROW_SHIFT)
                if row is not None:
                    position = packed & _POSITION
                    row.positions.setdefault(lexeme, {})[position] = LETTERS[position >> 24]
        return list(out.values())

    def column_rows(self, lexeme: str, letter: str) -> int:
        """Rows holding `lexeme` in the column of `letter` (a `kind : "x"` phrase's rows)."""
        column = LETTERS.index(letter)
        return len({p >> _ROW_SHIFT for p in self.postings.get(lexeme, ()) if (p & _POSITION) >> 24 == column})


async def load(tx: Any, table: str) -> HeldTable:
    """The table as its index holds it, read in the caller's snapshot."""
    await tx.run(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_instances USING fts5vocab(main, {table}, 'instance')")
    held = HeldTable()
    for r in await tx.all(
        f"SELECT e.seq AS seq, e.kind AS kind, e.expires_at AS expires_at FROM {table}_docsize d "
        "JOIN entries e ON e.seq = d.id"
    ):
        seq = int(r["seq"])
        held.kinds[seq] = str(r["kind"])
        held.expires[seq] = None if r["expires_at"] is None else float(r["expires_at"])
        held.lengths[seq] = 0
    lengths = held.lengths
    # Packed by SQLite itself (two values a row to convert, not four), in
    # the order of their stems (then row, column, offset).
    sql = (
        f"SELECT term, (doc << {_ROW_SHIFT}) | ((CASE col WHEN 'statement' THEN 0 WHEN 'evidence' THEN 1 "
        f"WHEN 'kind' THEN 2 ELSE 3 END) << 24) | offset FROM temp.{table}_instances"
    )
    current = array("Q")
    last = None
    for term, packed in await tx.tuples(sql):
        if term != last:
            current = held.postings[term] = array("Q")
            last = term
        current.append(packed)
        doc = packed >> _ROW_SHIFT
        lengths[doc] = lengths.get(doc, 0) + 1
    held.instances = sum(len(a) for a in held.postings.values())
    held.rows = len(lengths)
    return held


class Stems:
    """Text cut and stemmed by FTS5's own tokenizer: a private in-memory
    database with a table of that tokenizer, a row per text, and its
    `fts5vocab` instances read back.  Kept per text (agents' questions share
    their words).  Used from one event loop only."""

    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None
        self._known: dict[str, tuple[str, ...]] = {}

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            conn.execute(f"CREATE VIRTUAL TABLE words USING fts5(text, content='', tokenize='{TOKENIZE}')")
            conn.execute("CREATE VIRTUAL TABLE stems USING fts5vocab(words, 'instance')")
            self._conn = conn
        return self._conn

    def of(self, texts: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Each text's stems, in order."""
        texts = list(dict.fromkeys(texts))
        missing = [t for t in texts if t not in self._known]
        if missing:
            conn = self._connection()
            found: dict[int, list[tuple[int, str]]] = {i: [] for i in range(len(missing))}
            # Written, read back and rolled back: the table stays empty, and
            # a rollback costs less than deleting from FTS5.
            conn.execute("BEGIN")
            try:
                conn.executemany("INSERT INTO words(rowid, text) VALUES (?, ?)", list(enumerate(missing)))
                for term, doc, offset in conn.execute("SELECT term, doc, offset FROM stems").fetchall():
                    found[int(doc)].append((int(offset), str(term)))
            finally:
                conn.execute("ROLLBACK")
            new = {text: tuple(term for _, term in sorted(found[i])) for i, text in enumerate(missing)}
            out = {t: new[t] if t in new else self._known[t] for t in texts}
            kept = {t: stems for t, stems in new.items() if len(t) <= MAX_KEPT_CHARS}
            if len(self._known) + len(kept) > MAX_STEMS:
                self._known.clear()
            self._known.update(kept)
            return out
        return {t: self._known[t] for t in texts}
