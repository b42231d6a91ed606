"""HMAC signatures of webhook deliveries, checked over the raw body bytes.

GitHub: `X-Hub-Signature-256: sha256=<hex>` (HMAC-SHA256 of the body).  The
SHA-1 header is never consulted.

Standard Webhooks: `webhook-id`, `webhook-timestamp` (seconds), and
`webhook-signature` holding one or more space-separated `v1,<base64>` items
(several during a secret rotation), each an HMAC-SHA256 of
`"{id}.{timestamp}.{body}"` keyed with the bytes of a `whsec_<base64>` secret
(its base64 padding optional).
A timestamp more than 5 minutes away, in either direction, is stale.

Every comparison is constant-time, and no header value, however malformed,
raises: a bad one is simply not a valid signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from enum import Enum

TOLERANCE_SECONDS = 300
_GITHUB_SIGNATURE = re.compile(r"^sha256=([0-9a-fA-F]{64})$")
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_MESSAGE_ID = re.compile(r"^[\x21-\x7e]{1,256}$")
_B64 = re.compile(r"^[A-Za-z0-9+/]{43}=$")  # a SHA-256 digest in standard base64


def github_valid(secret: str, body: bytes, header: str | None) -> bool:
    if not secret or header is None:
        return False
    match = _GITHUB_SIGNATURE.fullmatch(header.strip())
    if match is None:
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, match.group(1).lower())


def github_sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def standard_key(secret: str) -> bytes | None:
    """The key bytes of a `whsec_<base64>` secret; None when it is not one."""
    if not isinstance(secret, str) or not secret.startswith("whsec_"):
        return None
    body = secret[len("whsec_"):]
    try:
        # With or without its padding, as the reference libraries take it.
        key = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if len(key) >= 16 else None


class Verdict(str, Enum):
    VALID = "valid"
    MALFORMED = "malformed"  # a header missing or unreadable
    STALE = "stale"  # timestamp outside the tolerance
    INVALID = "invalid"  # no signature matches


def standard_sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def standard_verify(
    keys: list[bytes],
    message_id: str | None,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    now: float,
) -> tuple[Verdict, int]:
    """The verdict, and the index in `keys` of the key that signed (-1 if none)."""
    if not message_id or not timestamp or not signature:
        return Verdict.MALFORMED, -1
    if not _MESSAGE_ID.fullmatch(message_id) or not _TIMESTAMP.fullmatch(timestamp.strip()):
        return Verdict.MALFORMED, -1
    stamp = timestamp.strip()
    if abs(now - int(stamp)) > TOLERANCE_SECONDS:
        return Verdict.STALE, -1
    offered: list[bytes] = []
    for item in signature.split(" ")[:10]:
        version, sep, value = item.partition(",")
        if version == "v1" and sep and _B64.fullmatch(value):
            offered.append(value.encode())
    if not offered:
        return Verdict.MALFORMED, -1
    signed = f"{message_id}.{stamp}.".encode() + body
    found = -1
    for index, key in enumerate(keys):
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
        for offer in offered:
            # Compare every pair: the time taken does not tell which one matched.
            if hmac.compare_digest(expected, offer) and found < 0:
                found = index
    return (Verdict.VALID, found) if found >= 0 else (Verdict.INVALID, -1)
