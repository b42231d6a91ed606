"""JSON on the request paths: orjson where it can, the standard library where it refuses.

Why orjson: on a CI attestation (the busiest write) reading the token's
claims, writing the provenance column and rendering the answer were a tenth
of the server's CPU with the `json` module (bench/attest.py, py-spy);
orjson does the same in a fifth of the time.  It is also the stricter
reader: `NaN`, lone surrogates, a byte order mark and nesting past 1024
levels are refused, as JSON (RFC 8259) says they should be.

Two differences are handled here, not left to callers: orjson writes no
integer past 64 bits and no non-string key (`dumps` falls back to `json`,
which writes both), and it reads an integer past 64 bits as a float.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(raw: bytes | str) -> Any:
    return orjson.loads(raw)


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """Compact UTF-8 JSON."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:  # orjson.JSONEncodeError: a 65-bit integer, a non-string key
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys,
                          allow_nan=False).encode()


def dumps_text(value: Any, *, sort_keys: bool = False) -> str:
    return dumps(value, sort_keys=sort_keys).decode()
