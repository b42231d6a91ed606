"""Fusing recall's two rankings, and how good the best answer is.

Pure functions over what the two stages found; no store, no model.

The lexical ranking (BM25 or ts_rank, with synonyms and kind hints) is
right when the question shares rare words with the entry: a pasted error
code, a file name, a flag.  The embedding is right when the question says
the same thing in other words.  So the weight of each side is chosen per
question, from three readings (docs/recall.md, Fusion, says it in prose):

- coverage: the share of the question's content words, weighted by rarity
  (inverse document frequency in the project), that the best lexical hit
  contains.  High coverage means the words themselves answer.
- a rare match: the best lexical hit contains a word of the question that
  few entries hold (at most `rare_df` of them) and that is written like a
  token (has a digit, a dot, an underscore, a slash, a dash, or capitals
  inside), the case an embedding model reads worst.
- separation: how far the top cosine stands above the second.  A clear
  winner by meaning is trusted more.

Both sides are scaled to 0..1 within the question (lexical score / best
lexical score; cosine above `cosine_floor`, / the best such), then
`score = a * lexical + (1 - a) * semantic` with `a` the lexical weight.

Relevance ("is anything here an answer?") is a logistic of the top cosine
(the notes of the evaluation found it separates answerable from unanswerable
questions better than the fused score), lifted by a rare token match; each
result's score is that relevance times its fused score relative to the best,
so scores run 0..1, best first, and the first one reads as a confidence.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from gateway.recall.search import STOP_WORDS, terms, words

_TOKEN_LIKE = re.compile(r"[A-Za-z]*[0-9_./\\-][\w./\\-]*|[a-z]+[A-Z]\w*|[A-Z]{2,}\w*")


@dataclass(frozen=True)
class FusionRule:
    base: float = 0.4  # the lexical weight when nothing stands out
    high_coverage: float = 0.8
    high_weight: float = 0.55
    low_coverage: float = 0.4
    low_weight: float = 0.25
    rare_df: int = 2
    rare_weight: float = 0.8
    separated: float = 0.08  # top cosine minus the second
    separated_shift: float = 0.15
    cosine_floor: float = 0.15
    # relevance = logistic((top cosine - centre) / width)
    relevance_centre: float = 0.42
    relevance_width: float = 0.06
    rare_relevance: float = 0.9
    lexical_centre: float = 0.5  # lexical-only relevance, on coverage
    lexical_width: float = 0.12


DEFAULT_RULE = FusionRule()


@dataclass(frozen=True)
class Readings:
    coverage: float
    rare_match: bool
    separation: float
    top_cosine: float
    weight: float  # the lexical weight chosen


def idf(df: Mapping[str, int], n: int, term: str) -> float:
    return math.log(1.0 + (n + 1) / (df.get(term, 0) + 0.5))


def token_like_terms(query: str) -> set[str]:
    """The words of the query's tokens that look pasted: `E0463`, `uv.lock`, `--locked`."""
    found: set[str] = set()
    for token in query.split():
        token = token.strip("`'\"()[]{},;:!?")
        if token and _TOKEN_LIKE.fullmatch(token):
            found.update(w for w in words(token) if w not in STOP_WORDS)
    return found


def coverage(query_terms: Sequence[str], text: str, df: Mapping[str, int], n: int) -> float:
    """Share of the query's rarity-weighted terms that `text` holds (0..1)."""
    if not query_terms:
        return 0.0
    held = set(words(text))
    total = sum(idf(df, n, t) for t in query_terms)
    return sum(idf(df, n, t) for t in query_terms if t in held) / total if total else 0.0


def logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def read(
    query: str,
    top_lexical_text: str | None,
    cosines_best_first: Sequence[float],
    df: Mapping[str, int],
    n: int,
    rule: FusionRule = DEFAULT_RULE,
) -> Readings:
    query_terms = terms(query)
    cov = coverage(query_terms, top_lexical_text, df, n) if top_lexical_text else 0.0
    rare = False
    if top_lexical_text:
        held = set(words(top_lexical_text))
        rare = any(t in held and 0 < df.get(t, 0) <= rule.rare_df for t in token_like_terms(query))
    top = cosines_best_first[0] if cosines_best_first else 0.0
    second = cosines_best_first[1] if len(cosines_best_first) > 1 else 0.0
    separation = top - second
    if rare:
        weight = rule.rare_weight
    elif cov >= rule.high_coverage:
        weight = rule.high_weight
    elif cov < rule.low_coverage:
        weight = rule.low_weight
    else:
        weight = rule.base
    if separation >= rule.separated and not rare:
        weight -= rule.separated_shift
    return Readings(cov, rare, separation, top, max(0.0, min(1.0, weight)))


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
    value = logistic((readings.top_cosine - rule.relevance_centre) / rule.relevance_width)
    if readings.rare_match:
        value = max(value, rule.rare_relevance)
    return value


def lexical_relevance(readings: Readings, rule: FusionRule = DEFAULT_RULE) -> float:
    """The same, when recall is lexical only: from coverage alone."""
    value = logistic((readings.coverage - rule.lexical_centre) / rule.lexical_width)
    if readings.rare_match:
        value = max(value, rule.rare_relevance)
    return value


def scored(ranked: Sequence[tuple[int, float]], top_relevance: float) -> list[tuple[int, float]]:
    """Scores an agent can read: the best result's is the relevance, the
    others scale down with their fused score."""
    if not ranked:
        return []
    best = ranked[0][1]
    if best <= 0:
        return [(seq, 0.0) for seq, _ in ranked]
    return [(seq, top_relevance * score / best) for seq, score in ranked]
