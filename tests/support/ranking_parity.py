"""Comparing two stores' rankings: the same names, in the same order, with
the same scores (to the last bits FTS5's sums and Python's may differ in)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

Ranked = list[tuple[str, float]]


def same(a: Ranked, b: Ranked) -> bool:
    return [n for n, _ in a] == [n for n, _ in b] and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for (_, x), (_, y) in zip(a, b)
    )


def difference(a: Ranked, b: Ranked, *about: Any) -> tuple[Any, ...] | None:
    """None when `a` and `b` are the same; else `about`, both lengths and
    each side around the first place they part (for the failure message)."""
    if same(a, b):
        return None
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if not same([x], [y])), min(len(a), len(b)))
    return (*about, len(a), len(b), a[max(0, at - 1):at + 2], b[max(0, at - 1):at + 2])


KINDS_ASKED = (None, "convention", "pitfall", "decision")


@dataclass
class Compared:
    differ: list[tuple[Any, ...]] = field(default_factory=list)
    asked: int = 0
    fused: int = 0  # searches whose answer was full (SQLite's two fused rankings, mostly)
    empty: int = 0


async def compare_rankings(
    questions: list[str], rankings: list[Any], pair: Callable[[str, str | None, Any], Awaitable[tuple[Ranked, Ranked]]],
    limit: int,
) -> Compared:
    """Every question on every ranking, and on the last (recall's own) with
    each kind filter too: `pair` gives the two answers to compare, the
    second the reference."""
    out = Compared()
    for text in questions:
        for ranking in rankings:
            for kind in KINDS_ASKED if ranking is rankings[-1] else (None,):
                a, b = await pair(text, kind, ranking)
                out.asked += 1
                out.empty += not b
                out.fused += len(b) == limit
                found = difference(a, b, text, ranking.name, kind)
                if found is not None:
                    out.differ.append(found)
    return out
