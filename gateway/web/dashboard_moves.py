"""The owner's moves in the dashboard beyond Confirm and Refute: Retire, an
expiry, a correction, and one move on the entries picked on the Knowledge
tab.  Each form carries the CSRF token and calls the same function as the
REST API (`hub.knowledge.retire`, `set_expiry`, `correct`, `bulk`)."""

from __future__ import annotations

import datetime as dt

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.accounts.sessions import Session
from gateway.core.errors import Invalid
from gateway.knowledge.service import BULK_ACTIONS, MAX_BULK
from gateway.web.dashboard_base import context, owner_post, redirect, safe_back, view, with_notice
from gateway.web.html import page
from gateway.web.inputs import hub_of

PICK = "pick:"  # a Knowledge tab checkbox is named pick:<entry id>
DEFAULT_BULK_REFUTE_REASON = "refuted by the project owner in the dashboard (several entries at once)"


def _text(fields: dict[str, str], name: str) -> str | None:
    value = " ".join(fields.get(name, "").split())
    return value or None


async def _entry_post(request: Request) -> tuple[Session, dict[str, str], str, str]:
    session, fields = await owner_post(request)
    slug = session.principal.project.slug
    entry_id = request.path_params["entry_id"]
    back = safe_back(fields.get("back"), slug, f"/projects/{slug}/entries/{entry_id}")
    return session, fields, entry_id, back


@view
async def retire(request: Request) -> Response:
    session, fields, entry_id, back = await _entry_post(request)
    await hub_of(request).knowledge.retire(session.principal, entry_id, _text(fields, "reason"))
    return redirect(with_notice(back, "retired", entry_id))


def _day_start(text: str) -> float:
    try:
        day = dt.date.fromisoformat(text.strip())
    except ValueError:
        raise Invalid("the expiry date must be a day such as 2026-12-31", code="invalid_field") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()


@view
async def expiry(request: Request) -> Response:
    session, fields, entry_id, back = await _entry_post(request)
    knowledge = hub_of(request).knowledge
    if fields.get("clear"):
        await knowledge.set_expiry(session.principal, entry_id, clear=True)
        return redirect(with_notice(back, "expiry_cleared", entry_id))
    raw = fields.get("expires_on", "").strip()
    if not raw:
        raise Invalid("pick the day the entry retires, or press Never expires", code="missing_field")
    await knowledge.set_expiry(session.principal, entry_id, expires_at=_day_start(raw))
    return redirect(with_notice(back, "expiry_set", entry_id))


@view
async def correct(request: Request) -> Response:
    session, fields, entry_id, _ = await _entry_post(request)
    # A statement keeps its own line breaks (browsers send CRLF); other fields are one line.
    statement = fields.get("statement", "").replace("\r\n", "\n").strip()
    evidence = fields.get("evidence", "").replace("\r\n", "\n").strip() or None
    entry = await hub_of(request).knowledge.correct(
        session.principal,
        entry_id,
        statement,
        kind=fields.get("kind") or None,
        evidence=evidence,
        reason=_text(fields, "reason"),
    )
    slug = session.principal.project.slug
    return redirect(with_notice(f"/projects/{slug}/entries/{entry.id}", "corrected", entry.id))


@view
async def bulk(request: Request) -> Response:
    hub = hub_of(request)
    session, fields = await owner_post(request)
    slug = session.principal.project.slug
    back = safe_back(fields.get("back"), slug, f"/projects/{slug}/knowledge")
    action = fields.get("action", "")
    picked = [name[len(PICK):] for name in fields if name.startswith(PICK)]
    if action not in BULK_ACTIONS:
        raise Invalid(f"choose what to do with the picked entries: {', '.join(BULK_ACTIONS)}", code="invalid_field")
    if not picked:
        raise Invalid("pick at least one entry (the boxes beside the entries) first", code="invalid_field")
    if len(picked) > MAX_BULK:
        raise Invalid(f"pick at most {MAX_BULK} entries at once", code="invalid_field")
    reason = _text(fields, "reason")
    if action == "refute" and reason is None:
        reason = DEFAULT_BULK_REFUTE_REASON
    results = await hub.knowledge.bulk(session.principal, action, picked, reason)
    refused = [r for r in results if r.error is not None]
    if not refused:
        return redirect(with_notice(back, f"bulk_{action}", count=len(results)))
    ctx = await context(request, session, "knowledge", action=action, results=results, refused=refused, back=back)
    return page("bulk_result.html", ctx)


P = "/projects/{project}"

routes = [
    Route(f"{P}/entries/bulk", bulk, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/retire", retire, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/expiry", expiry, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/correct", correct, methods=["POST"]),
]
