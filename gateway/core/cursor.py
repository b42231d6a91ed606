"""The opaque `cursor` of the HTTP listings (entries, proposals, the audit
ledger): a row key the client hands back to get the next page.

Encoded, not raw, so that clients treat it as a token rather than a number to
do arithmetic on; decoded strictly, so that only a cursor this API returned is
accepted and anything else is a 422 `invalid_cursor`, never a database error.
"""

from __future__ import annotations

import base64
import re

from gateway.core.errors import Invalid


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"s{seq}".encode()).decode().rstrip("=")


# What a cursor may decode to: "s" and a row key a 64-bit column can hold.
# ASCII digits only: int() alone takes "-5", " 5", "1_000" and Arabic-Indic
# digits, and a 40-digit number overflows SQLite's integer binding.
_CURSOR = re.compile(r"s(0|[1-9][0-9]{0,18})")
MAX_CURSOR_SEQ = 2**63 - 1


def decode_cursor(cursor: str | None) -> int | None:
    if cursor in (None, ""):
        return None
    seq = _cursor_seq(cursor)
    if seq is None:
        raise Invalid("cursor is not one this API returned", code="invalid_cursor")
    return seq


def _cursor_seq(cursor: str | None) -> int | None:
    if not isinstance(cursor, str) or len(cursor) > 32 or not cursor.isascii():
        return None
    try:
        # Strict: the lenient decoder drops stray characters, so "czU!!" would read as "s5".
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except ValueError:  # binascii.Error is a ValueError
        return None
    match = _CURSOR.fullmatch(raw.decode("ascii", "replace"))
    if match is None:
        return None
    seq = int(match.group(1))
    return seq if seq <= MAX_CURSOR_SEQ else None
