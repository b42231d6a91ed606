"""The owner's dashboard: sign-in, the Knowledge tab, an entry's page, the
audit ledger (the review pages live in `dashboard_review`).

Pages are rendered on the server (Jinja2, autoescaped); the only script is a
static file that puts "/" on the page's search box, and every page works
without it.  Every owner action posts a form carrying a CSRF token and calls
the same core function as the REST API (`hub.knowledge.confirm`,
`hub.knowledge.refute`, ...).  The owner's other moves are in
`dashboard_moves`, the project's tokens in `dashboard_tokens`.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gateway.knowledge import trust
from gateway.knowledge.corrections import replaced_id
from gateway.knowledge.model import Entry
from gateway.accounts.sessions import Session
from gateway.core.errors import Conflict, GatewayError, Unauthorized
from gateway.accounts.tokens import digest
from gateway.web.dashboard_base import (
    context,
    owner_post,
    owner_session,
    redirect,
    safe_back,
    view,
    with_notice,
)
from gateway.web.dashboard_moves import routes as move_routes
from gateway.web.dashboard_review import routes as review_routes
from gateway.web.dashboard_tokens import routes as token_routes
from gateway.web.html import STATIC_DIR, page
from gateway.web.inputs import hub_of, query_str
from gateway.web.labels import mapped_checks
from gateway.web.session import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    clear_cookie,
    csrf_ok,
    csrf_token,
    end_session,
    form_fields,
    load_session,
    require_csrf,
    set_cookie,
    signing_key,
    start_session,
)

PAGE_SIZE = 50
REVIEW_SIZE = 20  # candidates shown above the rest; the state filter pages through all of them
REVIEWED = tuple(s for s in trust.STATES if s != "candidate")
AUDIT_PAGE_SIZE = 100
AUDIT_ACTIONS = (
    "learn", "support", "promote", "override", "contradict", "rate_limited", "retire",
    "approve_proposal", "reject_proposal", "settings", "checkmap",
)
DEFAULT_REFUTE_REASON = "refuted by the project owner in the dashboard"
LOGIN_NONCE_SECONDS = 3600



# -- signing in and out ---------------------------------------------------------


async def _login_page(request: Request, *, error: str | None = None, status: int = 200, notice: str | None = None) -> Response:
    key = await signing_key(hub_of(request))
    nonce = request.cookies.get(LOGIN_COOKIE)
    if not nonce or len(nonce) > 100:
        nonce = secrets.token_urlsafe(24)
    ctx = await context(request, None)
    ctx.update(
        csrf=csrf_token(key, "login", nonce),
        error=error,
        next=request.query_params.get("next", "")[:2000],
    )
    if notice:
        ctx["notice"] = notice
    response = page("login.html", ctx, status=status)
    set_cookie(request, response, LOGIN_COOKIE, nonce, LOGIN_NONCE_SECONDS)
    return response


@view
async def login_form(request: Request) -> Response:
    return await _login_page(request)


@view
async def login(request: Request) -> Response:
    hub = hub_of(request)
    fields = await form_fields(request)
    key = await signing_key(hub)
    if not csrf_ok(key, "login", request.cookies.get(LOGIN_COOKIE), fields.get("csrf_token")):
        return await _login_page(request, error="The sign-in form expired or lacks its CSRF token; try again.", status=403)
    secret = fields.get("token", "").strip()
    try:
        principal = await hub.accounts.authenticate(secret)
    except Unauthorized:
        return await _login_page(request, error="That token is not valid (unknown or revoked).", status=401)
    if not principal.is_owner:
        return await _login_page(
            request,
            error=f"A {principal.level} token cannot sign in: the dashboard is for project owners.",
            status=403,
        )
    slug = principal.project.slug
    target = safe_back(fields.get("next"), slug, f"/projects/{slug}/knowledge")
    response = redirect(target)
    await start_session(request, response, principal, digest(secret))
    clear_cookie(request, response, LOGIN_COOKIE)
    return response


@view
async def logout_page(request: Request) -> Response:
    """A GET never changes state: it shows the sign-out button (a POST form
    with the CSRF token).  SameSite cookies do not stop a page on a sibling
    origin (another port of this host, a sibling subdomain) from loading
    `<img src=/logout>` with the owner's cookie."""
    session = await load_session(request)
    if session is None:
        return redirect("/login")
    return page("logout.html", await context(request, session))


@view
async def logout(request: Request) -> Response:
    session = await load_session(request)
    fields = await form_fields(request)
    if session is not None:
        await require_csrf(request, session, fields)
        await end_session(request, session)
    response = redirect("/login?notice=signed_out")
    clear_cookie(request, response, SESSION_COOKIE)
    return response


@view
async def home(request: Request) -> Response:
    session = await load_session(request)
    if session is None:
        return redirect("/login")
    return redirect(f"/projects/{session.principal.project.slug}/knowledge")


@view
async def project_home(request: Request) -> Response:
    return redirect(f"/projects/{quote(request.path_params['project'], safe='')}/knowledge")


# -- the Knowledge tab ------------------------------------------------------------------


@view
async def knowledge(request: Request) -> Response:
    hub = hub_of(request)
    session = await owner_session(request)
    principal = session.principal
    state = query_str(request, "state", 20)
    kind = query_str(request, "kind", 20)
    text = query_str(request, "q", 200)
    cursor = query_str(request, "cursor", 64)
    # Unfiltered, the tab is a review queue: the candidates waiting for the
    # owner first, then every other entry, each list newest first.  A filter
    # shows one list of what it selects.
    queue = not (state or kind or text)
    review: list[Entry] = []
    more_to_review = False
    if queue and cursor is None:
        review, rest = await hub.knowledge.list(principal, state="candidate", limit=REVIEW_SIZE)
        more_to_review = rest is not None
    entries, next_cursor = await hub.knowledge.list(
        principal, state=REVIEWED if queue else state, kind=kind, limit=PAGE_SIZE, cursor=cursor, text=text
    )
    project = principal.project
    counts = await hub.ledger.counts(principal)
    ctx = await context(
        request,
        session,
        "knowledge",
        queue=queue,
        review=review,
        more_to_review=more_to_review,
        entries=entries,
        next_cursor=next_cursor,
        mapped_checks=mapped_checks(hub.checkmaps, project.slug),
        filters={"state": state or "", "kind": kind or "", "q": text or ""},
        paged=cursor is not None,
        counts=counts,
        total=sum(counts.values()),
        k=project.settings.k_distinct_issuers,
        kinds=trust.KINDS,
        states=trust.STATES,
    )
    return page("knowledge.html", ctx)


@view
async def entry_page(request: Request) -> Response:
    hub = hub_of(request)
    session = await owner_session(request)
    principal = session.principal
    entry = await hub.knowledge.get(principal, request.path_params["entry_id"])
    project = principal.project
    now = hub.clock.now()
    rows, returned, used = await hub.ledger.entry_history(principal, entry)
    corrections = await hub.knowledge.corrections_of(principal, entry.id)
    until = trust.blocked_until([c.to_rule() for c in entry.contradictions], now)
    ctx = await context(
        request,
        session,
        "knowledge",
        entry=entry,
        mapped_checks=mapped_checks(hub.checkmaps, project.slug),
        audit_rows=rows,
        returned=returned,
        used=used,
        k=project.settings.k_distinct_issuers,
        blocked_until=until,
        corrections=corrections,
        replaces=replaced_id(entry),
        kinds=trust.KINDS,
    )
    return page("entry.html", ctx)


async def _entry_post(request: Request) -> tuple[Session, dict[str, str], str, str]:
    """An owner's form post on one entry: (session, fields, entry id, where to go back)."""
    session, fields = await owner_post(request)
    slug = session.principal.project.slug
    back = safe_back(fields.get("back"), slug, f"/projects/{slug}/knowledge")
    return session, fields, request.path_params["entry_id"], back


@view
async def confirm(request: Request) -> Response:
    session, _, entry_id, back = await _entry_post(request)
    try:
        await hub_of(request).knowledge.confirm(session.principal, entry_id)
    except Conflict as exc:
        return await _confirm_refused(request, session, entry_id, exc, back)
    return redirect(with_notice(back, "confirmed", entry_id))


async def _confirm_refused(request: Request, session: Session, entry_id: str, exc: GatewayError, back: str) -> Response:
    """The page a blocked or pointless confirm answers with: why, by whom, until when."""
    hub = hub_of(request)
    now = hub.clock.now()
    entry = await hub.knowledge.get(session.principal, entry_id)
    live = [c for c in entry.contradictions if c.until > now]
    until = trust.blocked_until([c.to_rule() for c in entry.contradictions], now)
    ctx = await context(
        request,
        session,
        "knowledge",
        entry=entry,
        error=exc,
        blocked=exc.code == "blocked_by_contradiction",
        live=live,
        blocked_until=until,
        back=back,
        kinds=trust.KINDS,
    )
    return page("confirm_refused.html", ctx, status=exc.status)


@view
async def refute(request: Request) -> Response:
    session, fields, entry_id, back = await _entry_post(request)
    reason = " ".join(fields.get("reason", "").split()) or DEFAULT_REFUTE_REASON
    await hub_of(request).knowledge.refute(session.principal, entry_id, reason)
    return redirect(with_notice(back, "refuted", entry_id))


# -- the audit ledger -----------------------------------------------------------------


@view
async def audit(request: Request) -> Response:
    hub = hub_of(request)
    session = await owner_session(request)
    entry_id = query_str(request, "entry", 100)
    action = query_str(request, "action", 40)
    cursor = query_str(request, "cursor", 64)
    rows, next_cursor = await hub.ledger.audit_page(
        session.principal, entry_id=entry_id, action=action, cursor=cursor, limit=AUDIT_PAGE_SIZE
    )
    ctx = await context(
        request,
        session,
        "audit",
        rows=rows,
        next_cursor=next_cursor,
        filters={"entry": entry_id or "", "action": action or ""},
        actions=AUDIT_ACTIONS,
        paged=cursor is not None,
    )
    return page("audit.html", ctx)


P = "/projects/{project}"

routes = [
    Route("/", home, methods=["GET"]),
    Route("/login", login_form, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout_page, methods=["GET"]),
    Route("/logout", logout, methods=["POST"]),
    Route(P, project_home, methods=["GET"]),
    *move_routes,
    Route(f"{P}/knowledge", knowledge, methods=["GET"]),
    Route(f"{P}/entries/{{entry_id}}", entry_page, methods=["GET"]),
    Route(f"{P}/entries/{{entry_id}}/confirm", confirm, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/refute", refute, methods=["POST"]),
    Route(f"{P}/audit", audit, methods=["GET"]),
    *review_routes,
    *token_routes,
    Mount("/static", app=StaticFiles(directory=str(STATIC_DIR)), name="static"),
]
