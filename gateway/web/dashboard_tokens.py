"""The Tokens page: the project's principals and their tokens (name, level,
created, revoked; never a secret or its hash), a form that creates one and
shows its secret once (post/redirect/get), and Revoke.  Every change writes a `settings` audit
row; revoking the token a session signed in with ends that session at once
(each request checks the token again)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any
from cryptography.fernet import Fernet, InvalidToken
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.accounts.sessions import Session
from gateway.core.errors import Invalid
from gateway.knowledge.model import LEVELS
from gateway.web.dashboard_base import context, owner_post, owner_session, redirect, view, with_notice
from gateway.web.html import page
from gateway.web.inputs import hub_of
from gateway.web.session import clear_cookie, set_cookie, signing_key

NEW_TOKEN_COOKIE = "rr_new_token"
NEW_TOKEN_SECONDS = 120  # from the form's answer to the page that shows the secret

LEVEL_HELP = {
    "read": "recall, read trusted entries and RELAYROOM.md (an agent that only looks things up)",
    "write": "read, plus learn, report errors, post thread messages and proposals (an agent at work)",
    "owner": "everything, and signing in to this dashboard (a person who reviews)",
}


def principals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tokens grouped by principal: each name once, its tokens newest first."""
    grouped: dict[str, dict[str, Any]] = {}
    for row in rows:
        item = grouped.setdefault(row["principal"], {"name": row["principal"], "tokens": [], "active": 0, "levels": set()})
        item["tokens"].append(row)
        if row["revoked_at"] is None:
            item["active"] += 1
            item["levels"].add(row["level"])
    return sorted(grouped.values(), key=lambda p: p["name"].casefold())


async def _tokens_page(request: Request, session: Session, *, created: dict[str, str] | None = None) -> Response:
    hub = hub_of(request)
    rows = await hub.accounts.project_tokens(session.principal, session.token_hash)
    ctx = await context(
        request, session, "tokens", principals=principals(rows), levels=LEVELS, level_help=LEVEL_HELP, created=created
    )
    return page("tokens.html", ctx)


@view
async def tokens(request: Request) -> Response:
    return await _tokens_page(request, await owner_session(request))


@view
async def create(request: Request) -> Response:
    session, fields = await owner_post(request)
    name = fields.get("name", "").strip()
    level = fields.get("level", "")
    secret = await hub_of(request).accounts.issue_token(session.principal, level, name)
    # Post/redirect/get: the answer is a redirect, so a reload of the page
    # that shows the secret submits nothing.  The secret rides to that page
    # once, encrypted in a short-lived cookie bound to this session (never in
    # a URL, never in the store, which keeps only the token's hash).
    slug = session.principal.project.slug
    response = redirect(f"/projects/{slug}/tokens/new")
    sealed = await seal_new_token(request, session, {"name": name, "level": level, "secret": secret})
    set_cookie(request, response, NEW_TOKEN_COOKIE, sealed, NEW_TOKEN_SECONDS, path=f"/projects/{slug}/tokens")
    return response


@view
async def created(request: Request) -> Response:
    """The new token's secret, shown once: the cookie that carried it is
    cleared by this answer, so a reload (or a later visit) shows none."""
    session = await owner_session(request)
    slug = session.principal.project.slug
    token = await open_new_token(request, session, request.cookies.get(NEW_TOKEN_COOKIE))
    if token is None:
        return redirect(with_notice(f"/projects/{slug}/tokens", "token_secret_gone"))
    response = await _tokens_page(request, session, created=token)
    clear_cookie(request, response, NEW_TOKEN_COOKIE, path=f"/projects/{slug}/tokens")
    return response


async def _fernet(request: Request) -> Fernet:
    key = hashlib.sha256(b"relayroom-new-token:" + await signing_key(hub_of(request))).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def _bound_to(session: Session) -> str:
    return hashlib.sha256(b"relayroom-new-token-session:" + session.nonce.encode()).hexdigest()


async def seal_new_token(request: Request, session: Session, token: dict[str, str]) -> str:
    payload = json.dumps({**token, "session": _bound_to(session)}).encode()
    return (await _fernet(request)).encrypt(payload).decode("ascii")


async def open_new_token(request: Request, session: Session, sealed: str | None) -> dict[str, str] | None:
    """What `seal_new_token` sealed for this very session, within its time;
    None for anything else (no cookie, another session's, expired, forged)."""
    if not sealed or len(sealed) > 1000:
        return None
    try:
        payload = json.loads((await _fernet(request)).decrypt(sealed.encode("ascii"), ttl=NEW_TOKEN_SECONDS))
    except (InvalidToken, ValueError, UnicodeError):
        return None
    if not isinstance(payload, dict) or not hmac.compare_digest(str(payload.get("session")), _bound_to(session)):
        return None
    return {key: str(payload.get(key, "")) for key in ("name", "level", "secret")}


@view
async def revoke(request: Request) -> Response:
    session, _ = await owner_post(request)
    raw = request.path_params["token_id"]
    if not raw.isdigit() or len(raw) > 18:
        raise Invalid("token ids are numbers", code="invalid_field")
    await hub_of(request).accounts.revoke_token(session.principal, int(raw))
    return redirect(with_notice(f"/projects/{session.principal.project.slug}/tokens", "token_revoked"))


P = "/projects/{project}"

routes = [
    Route(f"{P}/tokens", tokens, methods=["GET"]),
    Route(f"{P}/tokens", create, methods=["POST"]),
    Route(f"{P}/tokens/new", created, methods=["GET"]),
    Route(f"{P}/tokens/{{token_id}}/revoke", revoke, methods=["POST"]),
]
