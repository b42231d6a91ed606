"""JSON on the request paths: orjson where it can, the standard library where it refuses.

Why orjson: JSON was a visible share of a CI attestation's server CPU with
the `json` module, and orjson does the same work much faster
(docs/decisions/0005).  It is also the stricter reader: `NaN`, lone
surrogates, a byte order mark and nesting past 1024 levels are refused, as
JSON (RFC 8259) says they should be.

Two differences are handled here, not left to callers: orjson writes no
integer past 64 bits and no non-string key (`dumps` falls back to `json`,
which writes both), and it reads an integer past 64 bits as a float.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# A JSON body of the API, MCP included (a check map's publication too; webhooks have their own): larger is 413.
API_BODY_LIMIT = 64 * 1024


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
