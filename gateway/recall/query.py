"""What an agent typed, shaped into the words recall looks for.

Pure functions, the same for every store: the store only ranks the weighted
words it is given with its own index (`Queries.lexical`).

- Any text is accepted (quotes, operators, NUL, emoji, 2000 characters):
  only word tokens survive, and the store quotes each one, so nothing an
  agent types is read as query syntax.
- Stop words ("how", "do", "I", "should") are dropped: they match most
  entries and say nothing.  A question of stop words only keeps them.
- Synonyms from a small curated table of software vocabulary
  (`gateway.recall.vocabulary`: "rename" also looks for "name", "db" for
  "database") are looked for too, each at a quarter of the weight of the
  agent's own words.
- Kind hints: "pitfall", "gotcha", "why did we decide" in a question say
  which kind of entry answers it; `hinted_kinds` names them and the lexical
  stage lifts those entries a little (a hint never hides: `kind=` filters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from gateway.recall.vocabulary import KIND_HINTS, synonyms_for

MAX_QUERY_CHARS = 2000
MAX_TERMS = 24
EXPANSIONS_PER_TERM = 4
MAX_WORDS = 64
SYNONYM_WEIGHT = 0.25  # a synonym counts a quarter of the agent's own word

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
    must need use using used get got make made way thing things want wants like also ok okay please
    someone something anything does doesn't isn't can't won't i've i'd let lets
    """.split()
)


@dataclass(frozen=True)
class Plan:
    """The weighted words to look for, and the kinds the question asks for."""

    terms: tuple[tuple[str, float], ...]
    hinted_kinds: frozenset[str]

    @property
    def empty(self) -> bool:
        return not self.terms


def words(text: str) -> list[str]:
    """Word tokens of `text`, lower-cased, apostrophes normalised."""
    found: list[str] = _WORD.findall(text[:MAX_QUERY_CHARS].casefold())
    if "’" in text:
        return [word.replace("’", "'") for word in found]
    return found


@lru_cache(maxsize=1024)
def query_words(query: str) -> tuple[str, ...]:
    """`words` of a question, kept: a recall reads its question more than once."""
    return tuple(words(query))


def terms(query: str, *, tokens: Sequence[str] | None = None) -> list[str]:
    """The query's distinct content words, lower-cased, in order."""
    all_words = words(query) if tokens is None else tokens
    seen: dict[str, None] = {}
    for word in all_words:
        if word in STOP_WORDS or len(word) < 2 and not word.isdigit():
            continue
        seen.setdefault(word, None)
        if len(seen) >= MAX_TERMS:
            break
    if not seen:  # a question of stop words only still deserves an answer
        for word in all_words[:MAX_TERMS]:
            seen.setdefault(word, None)
    return list(seen)


def _cue_tables() -> tuple[dict[str, frozenset[str]], tuple[tuple[str, str], ...]]:
    """Kind cues of one word (looked up) and of several (searched in the text)."""
    single: dict[str, set[str]] = {}
    multi: list[tuple[str, str]] = []
    for kind, cues in KIND_HINTS.items():
        for cue in cues:
            if " " in cue:
                multi.append((f" {cue} ", kind))
            else:
                single.setdefault(cue, set()).add(kind)
    return {cue: frozenset(kinds) for cue, kinds in single.items()}, tuple(multi)


_SINGLE_CUES, _MULTI_CUES = _cue_tables()


def hinted_kinds(tokens: Sequence[str]) -> frozenset[str]:
    """The entry kinds a question asks for in so many words."""
    found: set[str] = set()
    for token in tokens:
        found |= _SINGLE_CUES.get(token, frozenset())
    text = " " + " ".join(tokens) + " "
    found.update(kind for cue, kind in _MULTI_CUES if cue in text)
    return frozenset(found)


@lru_cache(maxsize=8192)
def expansion_words(term: str) -> tuple[str, ...]:
    """The words of `term`'s first synonyms, stop words left out."""
    out: list[str] = []
    for synonym in synonyms_for(term)[:EXPANSIONS_PER_TERM]:
        out.extend(part for part in words(synonym) if part not in STOP_WORDS)
    return tuple(out)


@lru_cache(maxsize=1024)
def plan(query: str) -> Plan:
    """What to look for.  Never raises."""
    tokens = query_words(query)
    own = terms(query, tokens=tokens)
    weighted: dict[str, float] = {word: 1.0 for word in own}
    for word in own:
        for part in expansion_words(word):
            weighted.setdefault(part, SYNONYM_WEIGHT)
    return Plan(tuple(weighted.items())[:MAX_WORDS], hinted_kinds(tokens))
