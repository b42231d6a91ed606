"""Comparing two stores' rankings: the same names, in the same order, with
the same scores (to the last bits FTS5's sums and Python's may differ in)."""

from __future__ import annotations

import math
from typing import Any

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
