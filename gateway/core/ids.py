"""Opaque, sortable identifiers: a prefix, 48 bits of milliseconds, 80 random bits."""

from __future__ import annotations

import base64
import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two characters
# RFC 4648 base32 reads 5 bits at a time, most significant first, as `_b32`
# does: mapped letter for letter onto Crockford's alphabet, its encoding of
# 10 random bytes is `_b32` of their 80 bits, computed in C.
_FROM_RFC4648 = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())
_last_millis: tuple[int, str] = (-1, "")  # ids made within one millisecond share its digits


def _b32(value: int, length: int) -> str:
    """`length` (even) base32 characters of `value`, most significant first."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(5 * length - 10, -1, -10)])


def new_id(prefix: str) -> str:
    global _last_millis
    millis = int(time.time() * 1000) & ((1 << 48) - 1)
    if _last_millis[0] != millis:
        _last_millis = (millis, _b32(millis, 10))
    return f"{prefix}_{_last_millis[1]}{base64.b32encode(os.urandom(10)).translate(_FROM_RFC4648).decode()}"
