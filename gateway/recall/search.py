"""Turning what an agent typed into a safe, well-shaped full-text query.

Pure functions, shared by both recall indexes (SQLite FTS5 in
`gateway.store.search_index`, PostgreSQL in `gateway.store.search_postgres`):
the backend only turns a `QueryPlan` into its own syntax and hands the
candidates back to `rerank`.

How a query is shaped, and why:

- Safety first: any text is accepted (quotes, FTS operators, NUL, emoji, 2000
  characters).  Only word tokens survive, each later quoted as a string
  literal, so nothing an agent types is ever read as query syntax.
- Stop words ("how", "do", "I", "should") are dropped: a common word matches
  most rows and costs the ranking for nothing.  A query of stop words only
  keeps them, so it still gets an answer.
- Terms are OR-ed: a question in other words than the entry still finds it,
  and BM25 ranks the entries sharing more (and rarer) terms first.
- The agent's own words weigh `Ranking.original_weight` (4) times a
  synonym's (`fuse`: BM25 is a sum over the query's phrases).
- Synonyms come from a small curated table of software vocabulary
  (`gateway.recall.vocabulary`): "rename" also looks for "name", "pytest" for
  "test", "db" for "database".  Expansion is per term and capped.
- Prefix matching ("config" finding "configtoml") is available
  (`Ranking.prefix`) but off: it measured neutral to negative on the
  evaluation set and costs time on big indexes.
- In a big project, words that alone match thousands of rows are set aside
  (`prune`): BM25 costs per matched row and such words add little to it.
- Kind hints: "pitfall", "gotcha", "why did we decide" in a question say
  which kind of entry answers it; matching entries get a bounded boost in
  `rerank` (a hint never hides the other kinds: `kind=` does that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Iterable, NamedTuple, Sequence

from gateway.recall.vocabulary import KIND_HINTS, synonyms_for

MAX_QUERY_CHARS = 2000
MAX_TERMS = 24
MAX_EXPANSIONS_PER_TERM = 4
MAX_PHRASES = 64
MIN_PREFIX_CHARS = 5

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z0-9])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

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
class Ranking:
    """One way to rank: the knobs the evaluation compares (bench/recall_quality.py).

    `DEFAULT_RANKING` is what recall uses."""

    name: str = "default"
    statement_weight: float = 3.0
    evidence_weight: float = 1.0
    kind_weight: float = 0.5
    aliases_weight: float = 1.0
    stop_words: bool = True
    synonyms: bool = True
    prefix: bool = False
    kind_hints: bool = True
    original_weight: int = 4
    expansions_per_term: int = MAX_EXPANSIONS_PER_TERM
    kind_boost: float = 0.25
    candidates: int = 60


@dataclass(frozen=True)
class Phrase:
    """One term of the query: the word, how many times it counts, whether
    it also matches as a prefix, and whether it is a synonym (not the
    agent's own word)."""

    text: str
    weight: int = 1
    prefix: bool = False
    expansion: bool = False


@dataclass(frozen=True)
class QueryPlan:
    phrases: tuple[Phrase, ...]
    hinted_kinds: frozenset[str] = field(default_factory=frozenset)
    original_weight: int = 1

    @property
    def empty(self) -> bool:
        return not self.phrases

    @property
    def originals(self) -> tuple[Phrase, ...]:
        """The agent's own words."""
        return tuple(p for p in self.phrases if not p.expansion)

    @property
    def expansions(self) -> tuple[Phrase, ...]:
        """Synonyms of the agent's words."""
        return tuple(p for p in self.phrases if p.expansion)


def words(text: str) -> list[str]:
    """Word tokens of `text`, lower-cased, apostrophes normalised."""
    found: list[str] = _WORD.findall(text[:MAX_QUERY_CHARS].casefold())
    if "’" in text:
        return [word.replace("’", "'") for word in found]
    return found


@lru_cache(maxsize=1024)
def query_words(query: str) -> tuple[str, ...]:
    """`words` of a question, kept: a recall reads its question twice (its
    plan, and how much of it the best answer holds)."""
    return tuple(words(query))


def terms(query: str, *, stop_words: bool = True, tokens: Sequence[str] | None = None) -> list[str]:
    """The query's distinct content words, lower-cased, in order (`tokens`: its `words`, if already split)."""
    all_words = words(query) if tokens is None else tokens
    seen: dict[str, None] = {}
    for word in all_words:
        if stop_words and (word in STOP_WORDS or len(word) < 2 and not word.isdigit()):
            continue
        seen.setdefault(word, None)
        if len(seen) >= MAX_TERMS:
            break
    if not seen:
        # A query of stop words only still deserves an answer.
        for word in all_words:
            seen.setdefault(word, None)
            if len(seen) >= MAX_TERMS:
                break
    return list(seen)


def _cue_tables() -> tuple[dict[str, frozenset[str]], tuple[tuple[str, str], ...]]:
    """Kind cues of one word (looked up in a dict) and of several (searched in the text)."""
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


def hinted_kinds(query: str, *, tokens: Sequence[str] | None = None) -> frozenset[str]:
    """The entry kinds a question asks for in so many words."""
    tokens = words(query) if tokens is None else tokens
    found: set[str] = set()
    for token in tokens:
        kinds = _SINGLE_CUES.get(token)
        if kinds:
            found |= kinds
    if _MULTI_CUES:
        text = " " + " ".join(tokens) + " "
        for cue, kind in _MULTI_CUES:
            if kind not in found and cue in text:
                found.add(kind)
    return frozenset(found)


@lru_cache(maxsize=8192)
def expansion_words(term: str, per_term: int) -> tuple[str, ...]:
    """The words of `term`'s first `per_term` synonyms, stop words left out
    (a pure function of the curated table, so kept per process: agents' questions share words)."""
    out: list[str] = []
    for synonym in synonyms_for(term)[:per_term]:
        out.extend(part for part in words(synonym) if part not in STOP_WORDS)
    return tuple(out)


def plan_query(query: str, ranking: Ranking | None = None) -> QueryPlan:
    """What to look for: weighted phrases and kind hints.  Never raises."""
    ranking = ranking or DEFAULT_RANKING
    tokens = query_words(query)
    base = terms(query, stop_words=ranking.stop_words, tokens=tokens)
    phrases: dict[str, Phrase] = {}
    for term in base:
        phrases[term] = Phrase(term, ranking.original_weight, ranking.prefix and len(term) >= MIN_PREFIX_CHARS)
    if ranking.synonyms:
        for term in base:
            for part in expansion_words(term, ranking.expansions_per_term):
                if part not in phrases:
                    phrases[part] = Phrase(part, 1, False, expansion=True)
    kept = tuple(phrases.values())[:MAX_PHRASES]
    hints = hinted_kinds(query, tokens=tokens) if ranking.kind_hints else frozenset()
    return QueryPlan(kept, hints, ranking.original_weight)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def fts5_expression(phrases: Sequence[Phrase], *, repeat: bool = False, require_all: bool = False) -> str | None:
    """The phrases OR-ed as an FTS5 MATCH expression, or None when empty.

    Every phrase is a quoted string (so no operator or column filter can be
    injected); a prefix phrase is `"word"*`.  With `repeat`, a phrase of
    weight n is written n times: BM25 sums over the query's phrases, so that
    weighs it n times (simple, but each repeat costs a pass over its rows:
    the index runs the weights as two queries instead, see `fuse`)."""
    parts: list[str] = []
    for phrase in phrases:
        token = _quote(phrase.text) + ("*" if phrase.prefix else "")
        parts.extend([token] * (max(1, phrase.weight) if repeat else 1))
    return (" AND " if require_all else " OR ").join(parts) if parts else None


def fts5_match(query: str | QueryPlan, ranking: Ranking | None = None) -> str | None:
    """One FTS5 MATCH expression for the whole query (weights as repeats),
    or None when the query has no words."""
    plan = query if isinstance(query, QueryPlan) else plan_query(query, ranking)
    return fts5_expression(plan.phrases, repeat=True)


def fuse(originals: Iterable[tuple[int, float]], expansions: Iterable[tuple[int, float]], weight: int) -> dict[int, float]:
    """Scores of the agent's words and of their synonyms, ranked apart, as
    one score: `original + expansion / weight`.  BM25 is a sum over phrases,
    so for every entry both lists hold this is exactly the score of one
    query whose own words are repeated `weight` times (divided by `weight`);
    an entry outside one list's top gets nothing from that part."""
    scores: dict[int, float] = {}
    for seq, score in originals:
        scores[seq] = score
    for seq, score in expansions:
        scores[seq] = scores.get(seq, 0.0) + score / max(1, weight)
    return scores


# A phrase matching more rows than this is "common" in a big project: its
# low IDF adds little to the ranking, while scoring every row it matches is
# what makes recall slow (BM25 costs per matched row).  Below this size
# nothing is pruned and the ranking is exact.
COMMON_ROWS = 1000
# The rows one BM25 statement of a big project may bring in: the rare
# phrases are kept rarest first while the sum of their rows stays within it
# (the rarest is always kept).  With each evaluation project padded with
# 10,000 synthetic entries it ranks exactly as without (MRR@10 0.795; 1,500
# gives 0.794, 1,000 0.790), and it bounds the slowest questions: the p99
# of the two statements at 10k entries 3.3 -> 2.6 ms.
ROW_BUDGET = 2000


@dataclass(frozen=True)
class Pruned:
    """What to rank with once common phrases are set aside."""

    originals: tuple[Phrase, ...]
    expansions: tuple[Phrase, ...]
    require_all: bool  # the agent's words AND-ed (every one of them was common)


def within_budget(phrases: tuple[Phrase, ...], matches: dict[str, int], budget: int = ROW_BUDGET) -> tuple[Phrase, ...]:
    """The rarest of `phrases` whose rows add up to at most `budget` (at
    least the rarest one), in their order."""
    kept: set[str] = set()
    used = 0
    for phrase in sorted(phrases, key=lambda p: matches.get(p.text, 0)):
        rows = matches.get(phrase.text, 0)
        if kept and used + rows > budget:
            break
        kept.add(phrase.text)
        used += rows
    return tuple(p for p in phrases if p.text in kept)


def prune(plan: QueryPlan, matches: dict[str, int], limit: int = COMMON_ROWS, budget: int = ROW_BUDGET) -> Pruned:
    """Drop the phrases that match more than `limit` rows (`matches`, counted
    up to limit + 1), and past `budget` rows a statement (`within_budget`),
    keeping the ranking exact for everything else.

    If every one of the agent's own words is common, they are kept and
    AND-ed instead: the rows holding all of them are few, and the best.  A
    word that matches nothing (a typo, a word no entry uses) is neither: it
    brings no row, so it must not crowd out the words that do."""
    def rare(phrases: tuple[Phrase, ...]) -> tuple[Phrase, ...]:
        return tuple(p for p in phrases if 0 < matches.get(p.text, 0) <= limit)

    originals = rare(plan.originals)
    expansions = within_budget(rare(plan.expansions), matches, budget)
    if originals:
        return Pruned(within_budget(originals, matches, budget), expansions, False)
    present = tuple(p for p in plan.originals if matches.get(p.text, 0) > 0) or plan.originals
    return Pruned(present, expansions, len(present) > 1)


class Candidate(NamedTuple):
    """One ranked entry before the kind hints.  A named tuple, not a frozen
    dataclass: a big project's recall makes sixty a question, and a frozen
    dataclass's `__init__` (one `object.__setattr__` per field) was 2-3% of
    its server time."""

    seq: int
    score: float  # higher is better
    kind: str


def rerank(candidates: Iterable[Candidate], plan: QueryPlan, ranking: Ranking | None, limit: int) -> list[tuple[int, float]]:
    """Best first, after the kind-hint boost; ties broken by newer entry."""
    ranking = ranking or DEFAULT_RANKING
    boost = 1.0 + ranking.kind_boost
    scored = [
        (c.seq, c.score * boost if c.kind in plan.hinted_kinds else c.score) for c in candidates
    ]
    scored.sort(key=lambda item: (-item[1], -item[0]))
    return scored[:limit]


def identifier_parts(text: str) -> str:
    """The pieces of identifiers written together: `ConfigToml` -> `config
    toml`, `HTTPClient` -> `http client`, `useApi` -> `use api`.  Indexed in
    a low-weight column so a question that spells the words apart finds an
    entry that names the identifier (snake_case and kebab-case are already
    split by the tokenizer)."""
    pieces: list[str] = []
    for token in re.findall(r"[A-Za-z0-9]+", text):
        parts = _CAMEL.findall(token)
        if len(parts) > 1:
            pieces.extend(p.lower() for p in parts)
    return " ".join(pieces)


DEFAULT_RANKING = Ranking()

# The rankings the evaluation reports, from the floor up.
BASELINE = Ranking(
    name="bm25", statement_weight=1.0, evidence_weight=1.0, kind_weight=1.0, aliases_weight=0.0,
    synonyms=False, prefix=False, kind_hints=False, original_weight=1,
)
WEIGHTED = replace(BASELINE, name="+weights", statement_weight=3.0, evidence_weight=1.0, kind_weight=0.5, aliases_weight=1.0)
PREFIXED = replace(WEIGHTED, name="+prefix (not kept)", prefix=True)
SYNONYMS = replace(WEIGHTED, name="+synonyms", synonyms=True, original_weight=4)
KIND_HINTED = replace(SYNONYMS, name="+kind hints (default)", kind_hints=True)
LADDER: Sequence[Ranking] = (BASELINE, WEIGHTED, PREFIXED, SYNONYMS, KIND_HINTED)
assert replace(KIND_HINTED, name=DEFAULT_RANKING.name) == DEFAULT_RANKING, "the ladder's last rung is what recall uses"
