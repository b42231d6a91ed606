"""Dashboard sessions on the server side: who is signed in, until when.

A session is a row holding the *hash* of a random session id and the hash of
the owner token that signed in.  Looking one up joins its token, so signing
out, expiry, revoking the token or the token no longer being an owner's end
the session at once, in every process.  The cookie and CSRF handling, which
are HTTP, live in gateway/web/session.py; this module never sees a cookie.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from gateway.core.clock import HOUR, Clock
from gateway.core.config import Config
from gateway.knowledge.model import Principal
from gateway.store.base import Driver
from gateway.store.queries import _project

SESSION_SECONDS = 12 * HOUR


@dataclass(frozen=True)
class Session:
    principal: Principal
    token_hash: str
    nonce: str  # the session id itself: what the CSRF tokens of its forms are an HMAC of
    issued_at: float


def session_hash(session_id: str) -> str:
    return hashlib.sha256(b"relayroom-session:" + session_id.encode()).hexdigest()


def session_alive(row: dict[str, Any] | None, now: float) -> bool:
    """Whether a session row (joined to its token) still signs its owner in."""
    return (
        row is not None
        and row["session_ended_at"] is None
        and row["session_created_at"] <= now < row["session_expires_at"]
        and row["revoked_at"] is None
        and row["level"] == "owner"
    )


class Sessions:
    def __init__(self, driver: Driver, clock: Clock, config: Config) -> None:
        self.driver = driver
        self.clock = clock
        self.config = config
        self._key: bytes | None = None  # read from the store once per process

    async def signing_key(self) -> bytes:
        """The key cookies and CSRF tokens are signed with: derived from
        RELAYROOM_SECRET_KEY, or else from a key generated once and kept in
        the store (so every process of one hub signs alike)."""
        if self._key is None:
            if self.config.secret_key:
                secret = self.config.secret_key.reveal()
            else:
                candidate = secrets.token_urlsafe(48)
                secret = await self.driver.write(lambda q: q.meta_set_if_absent("secret_key", candidate))
            self._key = hashlib.sha256(b"relayroom-dashboard:" + secret.encode()).digest()
        return self._key

    async def start(self, token_hash: str) -> str:
        """A new session for the owner token whose hash is given: its id."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock.now()
        digest = session_hash(session_id)
        await self.driver.write(lambda q: q.insert_session(digest, token_hash, now, now + SESSION_SECONDS))
        return session_id

    async def find(self, session_id: str) -> Session | None:
        """The signed-in owner, checked against the store, or None."""
        row = await self.driver.read(lambda q: q.session_by_hash(session_hash(session_id)))
        if row is None or not session_alive(row, self.clock.now()):
            return None
        principal = Principal(project=_project(row), name=row["principal"], level="owner")
        return Session(principal=principal, token_hash=row["token_hash"], nonce=session_id,
                       issued_at=row["session_created_at"])

    async def end(self, session_id: str) -> None:
        """Sign out on the server: the session's cookie, wherever copied, is refused from now on."""
        digest, now = session_hash(session_id), self.clock.now()
        await self.driver.write(lambda q: q.end_session(digest, now))
