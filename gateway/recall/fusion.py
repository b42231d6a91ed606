"""Fusing recall's two rankings, and how good the best answer is.

Pure functions over what the two stages found; no store, no model.

The lexical ranking (BM25 or ts_rank, with synonyms and kind hints) is
right when the question shares telling words with one entry: a pasted error
code, a file name, a flag.  The embedding is right when the question says
the same thing in other words.  So the weight `a` of the lexical side is
chosen per question from how sure each side is of its first answer:

- lexical margin: 1 - (second lexical score / best lexical score).  One
  entry far ahead on the words means the words decided.
- separation: best cosine minus second best.  A clear winner by meaning.
- a rare match: the best lexical hit holds a word of the question that is
  written like a token (digits, dots, underscores, slashes, dashes or inner
  capitals: `E0463`, `uv.lock`, `HTTPClient`; not a word in capitals alone,
  `CI` or `TLS`) and that at most `rare_df` entries of the project hold; an
  embedding model reads such tokens worst.

`a = clip(base + margin_gain * lexical margin - separation_gain * separation)`,
at least `rare_weight` on a rare match; both sides are scaled to 0..1 within
the question (score / best score; cosine below `cosine_floor` counts as
nothing) and `fused = a * lexical + (1 - a) * semantic`.

Relevance ("is anything here an answer?") reads the best cosine and the
coverage (the share of the question's content words the best lexical hit
holds): `logistic((top cosine + 0.2 * coverage - 0.5) / 0.1)`, at least
`pasted_relevance` when the question is pasted tokens only and the best
lexical hit holds one of them as written, a token at most `rare_df` entries
hold (the model reads such a question worst); lexical recall alone uses
`logistic((coverage - 0.37) / 0.15)`.  Each result's score is that
relevance times its fused score relative to the best, so scores run 0..1,
best first, and the first one reads as a confidence: the chance that it
answers, for a question as likely to have no answer as one (below 0.5, maybe
nothing relevant).  docs/recall.md has the figures behind each number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

from gateway.recall.query import STOP_WORDS, query_words, terms, words

# A pasted token has a digit, `_`, `.`, `/`, `\` or `-` in it, or a capital
# inside lower case (`maxRetries`, `HTTPClient`).  A word in capitals alone
# (`CI`, `PR`, `API`, `TLS`) is an abbreviation that the model reads as well as
# any word: on the evaluation set a third of the override's firings were such
# words (bench/recall_semantic.py --diagnose).
_TOKEN_LIKE = re.compile(r"[A-Za-z]*[0-9_./\\-][\w./\\-]*|[a-z]+[A-Z]\w*|[A-Z]{2,}[a-z]{2,}\w*")


# A first score below this reads "maybe nothing relevant": the relevance is
# the chance that the first result answers, its constants fitted with
# answerable and unanswerable questions weighed alike; where most questions
# have an answer, a low score undersells the first result.
PROBABLY_RELEVANT = 0.5


@dataclass(frozen=True)
class FusionRule:
    base: float = 0.4  # the lexical weight when neither side stands out
    margin_gain: float = 0.4
    separation_gain: float = 2.0
    rare_df: int = 2
    rare_weight: float = 0.8
    cosine_floor: float = 0.0
    relevance_coverage: float = 0.2  # relevance = logistic((top cosine + this * coverage - centre) / width)
    relevance_centre: float = 0.5
    relevance_width: float = 0.1
    lexical_centre: float = 0.37  # lexical-only relevance = logistic((coverage - centre) / width)
    lexical_width: float = 0.15
    pasted_relevance: float = 0.9  # fused relevance at least, for a question of a rare pasted token the best hit holds


DEFAULT_RULE = FusionRule()
# The pair (`RELAYROOM_SEMANTIC_PAIR`): its confidence reads multilingual-e5-small's
# best cosine, whose unrelated entries sit near 0.8, so its own constants: the
# coverage weight fitted on dev for the order, the centre and width for the
# same chance as the single model's (answerable and unanswerable weighed alike).
PAIR_RULE = FusionRule(relevance_coverage=0.09, relevance_centre=0.872, relevance_width=0.017)


def rule_for(models: int) -> FusionRule:
    return PAIR_RULE if models > 1 else DEFAULT_RULE


@dataclass(frozen=True)
class Readings:
    coverage: float
    rare_match: bool
    lexical_margin: float
    separation: float  # the first model's best cosine minus its second
    top_cosine: float  # the best cosine the confidence reads (with the pair, e5's)
    weight: float  # the lexical weight chosen
    pasted: bool = False  # the question is pasted tokens only, one of them rare and held as written by the best hit


def _tokens(query: str) -> list[str]:
    """The query's whitespace-separated tokens, without surrounding punctuation."""
    return [t for t in (token.strip("`'\"()[]{},;:!?") for token in query.split()) if t]


def token_like_terms(query: str) -> set[str]:
    """The words of the query's tokens that look pasted: `E0463`, `uv.lock`, `--locked`."""
    return {w for token in _tokens(query) if _TOKEN_LIKE.fullmatch(token) for w in words(token) if w not in STOP_WORDS}


def pasted_match(query: str, text: str, df: Mapping[str, int], rare_df: int) -> bool:
    """Whether `query` is pasted tokens only and `text` holds one of them as
    written (not inside a longer token), one whose rarest word at most
    `rare_df` entries of the project hold."""
    tokens = _tokens(query)
    if not tokens or not all(_TOKEN_LIKE.fullmatch(t) for t in tokens):
        return False
    return any(
        0 < min((df.get(w, 0) for w in words(t)), default=0) <= rare_df
        and re.search(rf"(?<![\w.\-/]){re.escape(t)}(?![\w\-/]|\.\w)", text, re.IGNORECASE) is not None
        for t in tokens
    )


@lru_cache(maxsize=1024)
def _spaced_words(text: str) -> str:
    # One string, not a set: a cache of sets is thousands of objects for the
    # garbage collector to walk, a string is none.
    return " " + " ".join(words(text)) + " "


def holds(text: str, word: str) -> bool:
    """Whether `word` is one of the words of `text` (an entry's: kept per
    text, since recall reads the same entries again and again)."""
    return f" {word} " in _spaced_words(text)


def coverage(query_terms: Sequence[str], text: str) -> float:
    """Share of the query's content words that `text` holds (0..1)."""
    if not query_terms:
        return 0.0
    return sum(1 for t in query_terms if holds(text, t)) / len(query_terms)


def logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def read(
    query: str,
    top_lexical_text: str | None,
    lexical_best_first: Sequence[float],
    cosines_best_first: Sequence[float],
    df: Mapping[str, int],
    rule: FusionRule = DEFAULT_RULE,
    sure: float | None = None,
) -> Readings:
    """The readings of one question; `df` is the project's document
    frequency per word (empty when unknown: no rare match then); `sure`: the
    best cosine the confidence reads, when not the first of `cosines_best_first`."""
    cov = coverage(terms(query, tokens=query_words(query)), top_lexical_text) if top_lexical_text else 0.0
    rare = False
    if top_lexical_text and df:
        rare = any(holds(top_lexical_text, t) and 0 < df.get(t, 0) <= rule.rare_df for t in token_like_terms(query))
    best = lexical_best_first[0] if lexical_best_first else 0.0
    runner_up = lexical_best_first[1] if len(lexical_best_first) > 1 else 0.0
    margin = 1.0 - runner_up / best if best > 0 else 0.0
    top = cosines_best_first[0] if cosines_best_first else 0.0
    separation = top - cosines_best_first[1] if len(cosines_best_first) > 1 else 0.0
    weight = rule.base + rule.margin_gain * margin - rule.separation_gain * separation
    if rare:
        weight = max(weight, rule.rare_weight)
    pasted = top_lexical_text is not None and pasted_match(query, top_lexical_text, df, rule.rare_df)
    return Readings(cov, rare, margin, separation, top if sure is None else sure, max(0.0, min(1.0, weight)), pasted)


def fuse(
    lexical: Iterable[tuple[int, float]],
    cosine: Mapping[int, float],
    readings: Readings,
    rule: FusionRule = DEFAULT_RULE,
) -> list[tuple[int, float]]:
    """Every candidate of either side, best first, fused score (not yet 0..1
    relevance: see `scored`).  Ties go to the newer entry."""
    lexical = list(lexical)
    best_lexical = max((s for _, s in lexical), default=0.0)
    floor = rule.cosine_floor
    best_cosine = max(cosine.values(), default=0.0) - floor
    a = readings.weight
    fused: dict[int, float] = {}
    for seq in {s for s, _ in lexical} | set(cosine):
        fused[seq] = 0.0
    lexical_part = {seq: (score / best_lexical if best_lexical > 0 else 0.0) for seq, score in lexical}
    for seq in fused:
        semantic = max(0.0, cosine.get(seq, 0.0) - floor) / best_cosine if best_cosine > 0 else 0.0
        fused[seq] = a * lexical_part.get(seq, 0.0) + (1 - a) * semantic
    ranked = [(seq, score) for seq, score in fused.items() if score > 0]
    ranked.sort(key=lambda item: (-item[1], -item[0]))
    return ranked


def relevance(readings: Readings, rule: FusionRule = DEFAULT_RULE) -> float:
    """How likely the best result answers the question, 0..1 (fused recall)."""
    signal = readings.top_cosine + rule.relevance_coverage * readings.coverage
    value = logistic((signal - rule.relevance_centre) / rule.relevance_width)
    return max(value, rule.pasted_relevance) if readings.pasted else value


def lexical_relevance(readings: Readings, rule: FusionRule = DEFAULT_RULE) -> float:
    """The same when recall is lexical only: from coverage alone."""
    return logistic((readings.coverage - rule.lexical_centre) / rule.lexical_width)


def scored(ranked: Sequence[tuple[int, float]], top_relevance: float) -> list[tuple[int, float]]:
    """Scores an agent can read: the best result's is the relevance, the
    others scale down with their fused score."""
    if not ranked:
        return []
    best = ranked[0][1]
    if best <= 0:
        return [(seq, 0.0) for seq, _ in ranked]
    return [(seq, top_relevance * score / best) for seq, score in ranked]
