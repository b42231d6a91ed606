"""Opaque, sortable identifiers: a prefix, 48 bits of milliseconds, 80 random bits."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
BODY = "[0-9A-HJKMNP-TV-Z]{26}"  # what follows the prefix and `_`: a pattern, for the checks that read ids offline
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two characters
_last_millis: tuple[int, str] = (-1, "")  # ids made within one millisecond share its digits


def _b32(value: int, length: int) -> str:
    """`length` (even) base32 characters of `value`, most significant first."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(5 * length - 10, -1, -10)])


def new_id(prefix: str) -> str:
    global _last_millis
    millis = int(time.time() * 1000) & ((1 << 48) - 1)
    if _last_millis[0] != millis:
        _last_millis = (millis, _b32(millis, 10))
    # The 80 random bits as eight 10-bit pairs, spelled out: on Python 3.11
    # `base64.b32encode` is a Python loop (docs/decisions/0013).
    r = int.from_bytes(os.urandom(10), "big")
    p = _PAIRS
    return (f"{prefix}_{_last_millis[1]}{p[r >> 70]}{p[r >> 60 & 1023]}{p[r >> 50 & 1023]}{p[r >> 40 & 1023]}"
            f"{p[r >> 30 & 1023]}{p[r >> 20 & 1023]}{p[r >> 10 & 1023]}{p[r & 1023]}")
