"""Project tokens: random secrets shown once, stored as SHA-256 hashes.

A token has 256 bits of entropy, so a fast hash is enough (no password
stretching needed): the store can only tell whether a presented secret is one
it issued.  Lookup is by hash; the stored hash is then compared in constant
time so that no timing difference depends on how much of a guess was right.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "rr_"
MAX_TOKEN_CHARS = 200


def generate() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def matches(token: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(token), stored_digest)
