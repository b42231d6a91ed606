"""The Tokens page: the project's principals and their tokens (name, level,
created, revoked; never a secret or its hash), a form that creates one and
shows its secret once, and Revoke.  Every change writes a `settings` audit
row; revoking the token a session signed in with ends that session at once
(each request checks the token again)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.core.errors import Invalid
from gateway.knowledge.model import LEVELS
from gateway.web.dashboard_base import context, owner_post, owner_session, redirect, view, with_notice
from gateway.web.html import page
from gateway.web.inputs import hub_of

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


async def _tokens_page(request: Request, session: Any, *, created: dict[str, str] | None = None) -> Response:
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
    # The secret is shown in this answer only (never in a URL, never stored,
    # and the page is sent with Cache-Control: no-store).
    return await _tokens_page(request, session, created={"name": name, "level": level, "secret": secret})


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
    Route(f"{P}/tokens/{{token_id}}/revoke", revoke, methods=["POST"]),
]
