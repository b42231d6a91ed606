"""Dashboard sessions and CSRF tokens.

A session is a signed cookie (HMAC-SHA256 with the gateway's secret key:
`RELAYROOM_SECRET_KEY`, or else the key generated once and kept in the store)
holding the project, the principal, the *hash* of the owner token that logged
in, a random nonce and the time it was issued.  It is not a capability on its
own: every request looks the token hash up again, so revoking the owner's
token (or the token no longer being an owner's) ends the session at once.

CSRF: every state-changing form carries a hidden `csrf_token` that is an HMAC
of the session's nonce, so a page of another site can neither read nor forge
it.  The login form, before there is a session, uses a signed double-submit
cookie: a random nonce in an HttpOnly cookie, and in the form the HMAC of that
nonce.  Cookies are HttpOnly, SameSite=Strict, and Secure on https.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from gateway.clock import HOUR
from gateway.errors import BadRequest, Forbidden
from gateway.model import Principal
from gateway.store.queries import _project
from gateway.web.inputs import raw_body

SESSION_COOKIE = "rr_session"
LOGIN_COOKIE = "rr_login_csrf"
CSRF_FIELD = "csrf_token"
SESSION_SECONDS = 12 * HOUR
FORM_BODY_LIMIT = 256 * 1024
MAX_FORM_FIELDS = 50


@dataclass(frozen=True)
class Session:
    principal: Principal
    token_hash: str
    nonce: str
    issued_at: float


async def signing_key(hub: Any) -> bytes:
    key = hub.extensions.get("dashboard_key")
    if key is None:
        secret = hub.config.secret_key.reveal() if hub.config.secret_key else await hub.accounts.secret_key()
        key = hub.extensions["dashboard_key"] = hashlib.sha256(b"relayroom-dashboard:" + secret.encode()).digest()
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(key: bytes, payload: dict[str, Any]) -> str:
    body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    mac = _b64(hmac.new(key, b"session:" + body.encode(), hashlib.sha256).digest())
    return f"{body}.{mac}"


def unsign(key: bytes, value: str | None) -> dict[str, Any] | None:
    if not value or len(value) > 4096 or value.count(".") != 1:
        return None
    body, mac = value.split(".")
    expected = _b64(hmac.new(key, b"session:" + body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(mac, expected):
        return None
    try:
        payload = json.loads(_unb64(body))
    except (ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def csrf_token(key: bytes, purpose: str, nonce: str) -> str:
    return _b64(hmac.new(key, f"csrf:{purpose}:{nonce}".encode(), hashlib.sha256).digest())


def csrf_ok(key: bytes, purpose: str, nonce: str | None, submitted: str | None) -> bool:
    if not nonce or not submitted or len(submitted) > 200:
        return False
    return hmac.compare_digest(submitted, csrf_token(key, purpose, nonce))


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name, value, max_age=max_age, path="/", httponly=True, samesite="strict", secure=is_https(request)
    )


def clear_cookie(request: Request, response: Response, name: str) -> None:
    response.delete_cookie(name, path="/", httponly=True, samesite="strict", secure=is_https(request))


async def load_session(request: Request) -> Session | None:
    """The signed-in owner, re-checked against the store, or None."""
    hub = request.app.state.hub
    payload = unsign(await signing_key(hub), request.cookies.get(SESSION_COOKIE))
    if payload is None:
        return None
    try:
        slug, name, token_hash, nonce, issued_at = (
            str(payload["p"]), str(payload["n"]), str(payload["h"]), str(payload["c"]), float(payload["t"])
        )
    except (KeyError, TypeError, ValueError):
        return None
    if not issued_at <= hub.clock.now() < issued_at + SESSION_SECONDS:
        return None
    row = await hub.driver.read(lambda q: q.token_by_hash(token_hash))
    if (
        row is None
        or row["revoked_at"] is not None
        or row["level"] != "owner"
        or row["principal"] != name
        or row["slug"] != slug
    ):
        return None
    principal = Principal(project=_project(row), name=name, level="owner")
    request.state.principal = name
    return Session(principal=principal, token_hash=token_hash, nonce=nonce, issued_at=issued_at)


async def start_session(request: Request, response: Response, principal: Principal, token_hash: str) -> None:
    hub = request.app.state.hub
    payload = {
        "p": principal.project.slug,
        "n": principal.name,
        "h": token_hash,
        "c": secrets.token_urlsafe(24),
        "t": hub.clock.now(),
    }
    set_cookie(request, response, SESSION_COOKIE, sign(await signing_key(hub), payload), int(SESSION_SECONDS))


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
        for name, value in form.multi_items():
            if isinstance(value, str):
                fields.setdefault(name, value)
    return fields


async def require_csrf(request: Request, session: Session | None, fields: dict[str, str]) -> None:
    key = await signing_key(request.app.state.hub)
    if session is None or not csrf_ok(key, "form", session.nonce, fields.get(CSRF_FIELD)):
        raise Forbidden(
            "this form is missing its CSRF token or the session ended; reload the page and try again",
            code="csrf_failed",
        )
