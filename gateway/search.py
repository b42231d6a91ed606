"""Turning what an agent typed into a safe full-text query.

Any text is accepted: quotes, FTS operators and punctuation are never passed
through, only word tokens, each quoted as an FTS5 string.  Stop words are
dropped because a common word matches most rows of a project and costs the
ranking for nothing; the remaining terms are OR-ed so a question phrased in
other words still finds the entry, and BM25 ranks the ones sharing more
(and rarer) terms first.
"""

from __future__ import annotations

import re

MAX_QUERY_CHARS = 2000
MAX_TERMS = 24

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)

STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves i'm it's don't what's how's we're should've shall may might
    must need use using used get got make made way thing things
    """.split()
)


def terms(query: str) -> list[str]:
    """The query's distinct content words, lower-cased, in order."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(query[:MAX_QUERY_CHARS].casefold()):
        word = match.group(0).replace("’", "'")
        if word in STOP_WORDS or len(word) < 2 and not word.isdigit():
            continue
        seen.setdefault(word, None)
        if len(seen) >= MAX_TERMS:
            break
    if not seen:
        # A query of stop words only still deserves an answer.
        for match in _WORD.finditer(query[:MAX_QUERY_CHARS].casefold()):
            seen.setdefault(match.group(0), None)
            if len(seen) >= MAX_TERMS:
                break
    return list(seen)


def fts5_match(query: str) -> str | None:
    """An FTS5 MATCH expression for `query`, or None when it has no words."""
    words = terms(query)
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
