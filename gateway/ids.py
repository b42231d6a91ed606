"""Opaque, sortable identifiers: a prefix, 48 bits of milliseconds, 80 random bits."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two characters


def _b32(value: int, length: int) -> str:
    """`length` (even) base32 characters of `value`, most significant first."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(5 * length - 10, -1, -10)])


def new_id(prefix: str) -> str:
    millis = int(time.time() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_b32(millis, 10)}{_b32(rand, 16)}"
