"""PostgreSQL's query text for the recall index: phrases as `to_tsquery` input.

A phrase reaches PostgreSQL cut into FTS5's tokens first
(`gateway.store.bm25.document`), as the documents were, then quoted, so
that operators, colons and parentheses in an agent's words stay plain text.
Pure functions; `gateway.store.search_postgres` and
`gateway.store.pg_prefix_ranking` send what they build.
"""

from __future__ import annotations

from typing import Sequence

from gateway.recall.search import Phrase
from gateway.store import bm25


def lexeme(text: str, prefix: bool) -> str | None:
    """One phrase as tsquery input: a quoted lexeme (quote doubled, backslash
    escaped), so operators, colons and parentheses in it are plain text.
    The text is cut into FTS5's tokens first, as the documents were
    (`bm25.document`); None when no word is left, the one input tsquery
    would refuse."""
    text = bm25.document(text)
    if not text:
        return None
    quoted = "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
    return quoted + (":*" if prefix else "")


def tsquery_text(phrases: Sequence[Phrase], operator: str = "|") -> str:
    """The phrases as one `to_tsquery` input: each quoted (`lexeme`), joined
    by `|` (any) or `&` (every).  One parameter whatever the number of
    words, so a search has a handful of statement shapes, each prepared once."""
    return f" {operator} ".join(q for q in (lexeme(p.text, p.prefix) for p in phrases) if q is not None)


def _quoted(lexeme: str) -> str:
    """A lexeme as tsquery input, taken as it is (no stemming)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def term_query(term: bm25.Term, *, columns: bool = False) -> str:
    """A term as a tsquery of its lexemes: adjacent when several, and with
    `columns` within one column (FTS5's phrase never spans two)."""
    joined = " <-> ".join(_quoted(lex) for lex in term.lexemes)
    if not columns or len(term.lexemes) == 1:
        return joined if len(term.lexemes) == 1 else f"({joined})"
    return " | ".join("(" + " <-> ".join(f"{_quoted(lex)}:{w}" for lex in term.lexemes) + ")" for w in "ABCD")


def phrase_query(text: str) -> str:
    """A phrase of several tokens as `to_tsquery` input that matches its
    tokens adjacent within one column (what FTS5 counts for it)."""
    quoted = lexeme(text, False)
    assert quoted is not None
    return " | ".join(f"({quoted}:{w})" for w in "ABCD")
