"""Two models' cosines read as one similarity.

With two models an entry's stored vector is the two unit vectors side by
side, and so is the question's: each model's cosine comes from its own half.
The models' cosines live in different bands (MiniLM's unrelated texts sit
near 0.1, multilingual-e5-small's near 0.8), so each is scaled within the
question between the median and the best over the rows the question may
see, `max(0, (c - median) / (best - median))`, and the two are averaged:
an entry both models put near the top scores near 1, an ordinary one 0.
The first model's raw cosines stay what the lexical weight is read from
(its constants were chosen on MiniLM's cosines); the last model's raw
cosines are what the confidence reads (with the pair, e5's best cosine
tells answerable questions from the others better than MiniLM's; the pair
has constants of its own, `fusion.PAIR_RULE`).  With one model its cosines
are all three, unscaled.
"""

from __future__ import annotations

from typing import Any, Sequence


def per_model(vectors: Any, query: Any, widths: Sequence[int]) -> Any:
    """Each model's cosines, (models, rows): each model's part of the
    question against the same part of every row (a product per model reads
    only its columns; one product over the whole row against a block
    matrix read twice the floats)."""
    import numpy

    if len(widths) == 1:
        return (vectors @ query)[None, :]
    bounds = numpy.cumsum((0, *widths))
    return numpy.stack([vectors[:, a:b] @ query[a:b] for a, b in zip(bounds[:-1], bounds[1:])])


def combined(cosines: Any, allowed: Any = None) -> tuple[Any, Any, Any]:
    """Every row's similarity, the first model's and the last model's raw
    cosines, from `per_model`'s; the median and best are taken over the
    `allowed` rows (a boolean mask; None: every row)."""
    import numpy

    first, last = cosines[0], cosines[-1]
    if len(cosines) == 1:
        return first, first, first
    seen = cosines if allowed is None else cosines[:, allowed]
    if not seen.shape[1]:
        return numpy.zeros(len(first), numpy.float32), first, last
    median = numpy.median(seen, axis=1, keepdims=True)
    span = seen.max(axis=1, keepdims=True) - median
    # Every row alike for a model (one row, or equal cosines): it tells none apart.
    scaled = numpy.where(span > 0, numpy.maximum(cosines - median, 0.0) / numpy.where(span > 0, span, 1.0), 1.0)
    return scaled.mean(axis=0).astype(numpy.float32), first, last
