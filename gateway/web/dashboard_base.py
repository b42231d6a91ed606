"""What every dashboard page shares: the signed-in owner, the page context,
redirects after a post, and refusals rendered as pages."""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.core.errors import Forbidden, GatewayError, NotFound, Unauthorized
from gateway.web.html import SECURITY_HEADERS, error_page, wants_html
from gateway.accounts.sessions import Session
from gateway.web.session import csrf_token, form_fields, load_session, require_csrf, signing_key
from gateway.web.inputs import hub_of
from gateway.web.labels import issuer_label, labeller

Handler = Callable[[Request], Awaitable[Response]]

NOTICES = {
    "confirmed": "Confirmed: the entry is now trusted (audit row: override).",
    "refuted": "Refuted: the entry is now contradicted.",
    "approved": "Approved: the proposal is now a candidate entry (created via reflection).",
    "approved_duplicate": "Approved: the statement was already a live entry, the proposal now points to it.",
    "rejected": "Rejected: the proposal is closed.",
    "playbook_saved": "Saved: RELAYROOM.md now starts with the new base playbook.",
    "settings_saved": "Saved: the project settings are changed (audit row: settings).",
    "settings_unchanged": "Nothing changed: every setting already had that value.",
    "signed_out": "Signed out.",
    "retired": "Retired: the entry left recall and stays retired (audit row: retire).",
    "expiry_set": "Expiry set: the entry retires at 00:00 UTC on that day (audit row: retire).",
    "expiry_cleared": "Expiry cleared: the entry no longer expires (audit row: retire).",
    "corrected": "Correction written as a candidate. The entry it replaces stays as it is until this one is trusted; confirm it to make the switch.",
    "bulk_confirm": "Confirmed {count}: each is now trusted (one override row each).",
    "bulk_refute": "Refuted {count}: each is now contradicted.",
    "bulk_retire": "Retired {count}: each left recall.",
    "token_revoked": "Revoked: the token no longer works, and any session signed in with it has ended.",
    "checkmap_approved": "Approved: the published check map is in force, on every gateway within 2 seconds (audit row: checkmap).",
    "checkmap_rejected": "Rejected: the map in force stays as it was (audit row: checkmap).",
    "token_secret_gone": "A new token's secret is shown once, on the page the form leads to, and is not kept: "
    "if it was not copied, revoke that token and make another.",
}


def _plural_entries(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"


def _notice_text(params: Any) -> str | None:
    text = NOTICES.get(params.get("notice", ""))
    if text is None or "{count}" not in text:
        return text
    raw = params.get("count", "")
    count = int(raw) if raw.isdigit() and len(raw) < 6 else 0
    return text.replace("{count}", _plural_entries(count))


class SignInNeeded(Exception):
    """No valid session: a browser is sent to the login page."""


def view(handler: Handler) -> Handler:
    """Turn refusals into pages (or the JSON error body for non-browsers)."""

    @functools.wraps(handler)
    async def wrapper(request: Request) -> Response:
        try:
            return await handler(request)
        except SignInNeeded:
            if request.method in ("GET", "HEAD") and wants_html(request):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return redirect(f"/login?next={quote(target, safe='')}")
            return error_page(
                request, Unauthorized("sign in to the dashboard with an owner token", code="missing_session")
            )
        except GatewayError as exc:
            return error_page(request, exc)

    return wrapper


def redirect(url: str) -> Response:
    response = RedirectResponse(url, status_code=303)
    for header, value in SECURITY_HEADERS.items():
        response.headers[header] = value
    return response


async def owner_session(request: Request) -> Session:
    """The session of the owner of the project in the path, or sign-in.

    Its principal's project (settings included) was read with the token row
    in this request: pages use it rather than reading the project again."""
    session = await load_session(request)
    if session is None:
        raise SignInNeeded()
    slug = request.path_params.get("project")
    if slug is not None and session.principal.project.slug != slug:
        # Signed in to another project: this one does not exist for this session.
        raise NotFound(f"no project {slug!r} for this session; sign in with its owner token", code="project_not_found")
    return session


async def owner_post(request: Request) -> tuple[Session, dict[str, str]]:
    """A state-changing form: the CSRF token first (403 without it), then the session."""
    session = await load_session(request)
    fields = await form_fields(request)
    await require_csrf(request, session, fields)
    assert session is not None
    slug = request.path_params.get("project")
    if slug is not None and session.principal.project.slug != slug:
        raise Forbidden("this session belongs to another project", code="wrong_project")
    return session, fields


async def context(request: Request, session: Session | None, tab: str = "", **extra: Any) -> dict[str, Any]:
    hub = hub_of(request)
    key = await signing_key(hub)
    notice = _notice_text(request.query_params)
    return {
        "session": session,
        "project": session.principal.project.slug if session else None,
        "csrf": csrf_token(key, "form", session.nonce) if session else "",
        "tab": tab,
        "notice": notice,
        "notice_entry": request.query_params.get("entry", "")[:100] if notice else "",
        "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        "now": hub.clock.now(),
        # Issuer identities as people name them, from the project's check map in force.
        "issuer_label": labeller(hub.checkmaps, session.principal.project.slug) if session else issuer_label,
        **extra,
    }


def safe_back(back: str | None, slug: str, default: str) -> str:
    """A same-project path to return to after a post; anything else is the default."""
    if (
        not back
        or len(back) > 2000
        or not back.startswith(f"/projects/{slug}/")
        or "//" in back
        or "\\" in back
        or any(ord(ch) < 32 for ch in back)
    ):
        return default
    return back


def with_notice(path: str, notice: str, entry_id: str | None = None, *, count: int | None = None) -> str:
    base, _, query = path.partition("?")
    params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in ("notice", "entry", "count")]
    params.append(("notice", notice))
    if entry_id:
        params.append(("entry", entry_id))
    if count is not None:
        params.append(("count", str(count)))
    return f"{base}?{urlencode(params)}"

