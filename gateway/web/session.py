"""Dashboard sessions and CSRF tokens: the HTTP half.

A session lives on the server (gateway/accounts/sessions.py): a row of
`dashboard_sessions` holding the *hash* of a random session id, the hash of
the owner token that signed in, when it started, when it expires and when it
was ended.  The cookie carries
only the session id, signed with `itsdangerous` under the gateway's secret key
(`RELAYROOM_SECRET_KEY`, or else the key generated once and kept in the
store), so a forged cookie is refused before the store is asked.  Every
request looks the session up together with its token (one indexed join), so
signing out (`ended_at`), expiry, revoking the owner's token or the token no
longer being an owner's end the session at once, in every process; a copy of
the cookie is worth nothing afterwards.  Signing out ends only the session it
is sent from: the owner's other browsers stay signed in until they sign out
or the token is revoked.

CSRF: every state-changing form carries a hidden `csrf_token` that is an HMAC
of the session's id, so a page of another site can neither read nor forge
it.  The login form, before there is a session, uses a signed double-submit
cookie: a random nonce in an HttpOnly cookie, and in the form the HMAC of that
nonce.  Cookies are HttpOnly, SameSite=Strict, and Secure on https.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from itsdangerous import BadData, URLSafeSerializer
from starlette.requests import Request
from starlette.responses import Response

from gateway.accounts.sessions import SESSION_SECONDS, Session
from gateway.core.errors import BadRequest, Forbidden
from gateway.knowledge.model import Principal
from gateway.web.inputs import hub_of, raw_body

if TYPE_CHECKING:
    from gateway.hub import Hub

SESSION_COOKIE = "rr_session"
LOGIN_COOKIE = "rr_login_csrf"
CSRF_FIELD = "csrf_token"
FORM_BODY_LIMIT = 256 * 1024
MAX_COOKIE_CHARS = 512
# A page of 50 entries picked for one move, plus the form's own fields.
MAX_FORM_FIELDS = 120


async def signing_key(hub: "Hub") -> bytes:
    return await hub.sessions.signing_key()


def _serializer(key: bytes) -> URLSafeSerializer:
    return URLSafeSerializer(key, salt="relayroom-dashboard-session")


def sign(key: bytes, session_id: str) -> str:
    return _serializer(key).dumps(session_id)


def unsign(key: bytes, value: str | None) -> str | None:
    """The session id a cookie carries, or None for anything we did not sign."""
    if not value or len(value) > MAX_COOKIE_CHARS:
        return None
    try:
        session_id = _serializer(key).loads(value)
    except (BadData, ValueError, UnicodeError):
        return None
    return session_id if isinstance(session_id, str) and 0 < len(session_id) <= 100 else None


def csrf_token(key: bytes, purpose: str, nonce: str) -> str:
    return hmac.new(key, f"csrf:{purpose}:{nonce}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(key: bytes, purpose: str, nonce: str | None, submitted: str | None) -> bool:
    if not nonce or not submitted or len(submitted) > 200:
        return False
    return hmac.compare_digest(submitted, csrf_token(key, purpose, nonce))


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int, path: str = "/") -> None:
    response.set_cookie(
        name, value, max_age=max_age, path=path, httponly=True, samesite="strict", secure=is_https(request)
    )


def clear_cookie(request: Request, response: Response, name: str, path: str = "/") -> None:
    response.delete_cookie(name, path=path, httponly=True, samesite="strict", secure=is_https(request))


async def load_session(request: Request) -> Session | None:
    """The signed-in owner, checked against the store on every request, or None."""
    hub = hub_of(request)
    session_id = unsign(await signing_key(hub), request.cookies.get(SESSION_COOKIE))
    if session_id is None:
        return None
    session = await hub.sessions.find(session_id)
    if session is not None:
        request.state.principal = session.principal.name
    return session


async def start_session(request: Request, response: Response, principal: Principal, token_hash: str) -> None:
    hub = hub_of(request)
    session_id = await hub.sessions.start(token_hash)
    set_cookie(request, response, SESSION_COOKIE, sign(await signing_key(hub), session_id), int(SESSION_SECONDS))


async def end_session(request: Request, session: Session) -> None:
    """Sign out on the server: the session's cookie, wherever copied, is refused from now on."""
    await hub_of(request).sessions.end(session.nonce)


async def form_fields(request: Request) -> dict[str, str]:
    """A submitted form, bounded in size and field count (first value wins).

    Anything that is not a form reads as no fields at all, so that it fails
    the CSRF check (403) like any other post without a token."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    fields: dict[str, str] = {}
    if media == "application/x-www-form-urlencoded":
        raw = await raw_body(request, FORM_BODY_LIMIT)
        try:
            pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
        except (UnicodeDecodeError, ValueError):
            raise BadRequest("the form could not be read", code="malformed_request") from None
        for name, value in pairs:
            fields.setdefault(name, value)
    elif media == "multipart/form-data":
        try:
            form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=FORM_BODY_LIMIT)
        except Exception:  # the parser's own errors: a malformed form is the sender's mistake
            raise BadRequest("the form could not be read", code="malformed_request") from None
        for name, item in form.multi_items():
            if isinstance(item, str):
                fields.setdefault(name, item)
    return fields


async def require_csrf(request: Request, session: Session | None, fields: dict[str, str]) -> None:
    key = await signing_key(hub_of(request))
    if session is None or not csrf_ok(key, "form", session.nonce, fields.get(CSRF_FIELD)):
        raise Forbidden(
            "this form is missing its CSRF token or the session ended; reload the page and try again",
            code="csrf_failed",
        )
