"""Project tokens: random secrets shown once, stored as SHA-256 hashes.

A token has 256 bits of entropy, so a fast hash is enough (no password
stretching needed): the store can only tell whether a presented secret is one
it issued.  Lookup is by hash; the stored hash is then compared in constant
time so that no timing difference depends on how much of a guess was right.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

PREFIX = "rr_"
MAX_TOKEN_CHARS = 200
# `$RELAYROOM_TOKEN`, `${RELAYROOM_TOKEN}`, `%RELAYROOM_TOKEN%`: a variable a
# shell or a client configuration was meant to expand and did not.
PLACEHOLDER = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\}|%[A-Za-z_][A-Za-z0-9_]*%")


def generate() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def matches(token: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(token), stored_digest)


def is_placeholder(token: str) -> bool:
    """Whether a presented token is an unexpanded placeholder (an issued
    token starts with rr_, so it never is one)."""
    return len(token) <= 100 and PLACEHOLDER.fullmatch(token) is not None


def placeholder_message(token: str) -> str | None:
    """What to tell whoever sent `token`, when it is a placeholder; echoing
    it is safe, since it is a variable's name and not a secret."""
    if not is_placeholder(token):
        return None
    return (
        f"the bearer token is {token}, which looks like a placeholder that was not expanded: "
        "put the token itself (rr_...) in the client's configuration, or set that variable where the client starts"
    )
