"""REST routes of the owner's side: the owner's moves beyond confirm and
refute (retire, expiry, correction, several entries at once), thread
messages, reflection proposals, and the learning figures."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.core.clock import parse_rfc3339
from gateway.core.errors import Invalid
from gateway.knowledge.permissions import require
from gateway.recall.learning import DEFAULT_DAYS, MAX_DAYS, learning_report
from gateway.knowledge.threads import Threads
from gateway.web.api import created_entry
from gateway.web.inputs import hub_of, json_body, principal_for, query_int, query_str
from gateway.web.responses import JSONResponse



def _moment(value: Any, field: str) -> float:
    try:
        return parse_rfc3339(value)
    except (ValueError, TypeError, OverflowError):
        raise Invalid(f"{field} must be an RFC 3339 timestamp such as 2026-12-31T00:00:00Z", code="invalid_field") from None


async def retire_entry(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "retire")
    body = await json_body(request, optional=("reason",), allow_empty=True)
    hub = hub_of(request)
    entry = await hub.knowledge.retire(principal, request.path_params["entry_id"], body.get("reason"))
    return JSONResponse(entry.to_json(hub.clock.now()))


async def entry_expiry(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "set_expiry")
    body = await json_body(request, optional=("ttl_days", "expires_at"))
    if not body:
        raise Invalid("give ttl_days, or expires_at (null clears the expiry)", code="missing_field")
    clear = "expires_at" in body and body["expires_at"] is None
    expires_at = _moment(body["expires_at"], "expires_at") if body.get("expires_at") is not None else None
    hub = hub_of(request)
    entry = await hub.knowledge.set_expiry(
        principal, request.path_params["entry_id"], ttl_days=body.get("ttl_days"), expires_at=expires_at, clear=clear
    )
    return JSONResponse(entry.to_json(hub.clock.now()))


async def correct_entry(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "correct")
    body = await json_body(request, required=("statement",), optional=("kind", "evidence", "reason"))
    hub = hub_of(request)
    entry = await hub.knowledge.correct(
        principal,
        request.path_params["entry_id"],
        body["statement"],
        kind=body.get("kind"),
        evidence=body.get("evidence"),
        reason=body.get("reason"),
    )
    return JSONResponse(entry.to_json(hub.clock.now()), status_code=201)


async def bulk_entries(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "bulk")
    body = await json_body(request, required=("action", "entry_ids"), optional=("reason",))
    hub = hub_of(request)
    results = await hub.knowledge.bulk(principal, body["action"], body["entry_ids"], body.get("reason"))
    now = hub.clock.now()
    items: list[dict[str, Any]] = []
    for result in results:
        if result.entry is not None:
            items.append({"entry_id": result.entry_id, "ok": True, "entry": result.entry.to_json(now)})
        else:
            assert result.error is not None
            # The contract's error body, per entry: the same code and message a single move answers.
            error = {"code": result.error.code, "message": result.error.message, **result.error.extra}
            items.append({"entry_id": result.entry_id, "ok": False, "error": error})
    moved = sum(1 for r in results if r.entry is not None)
    return JSONResponse({"action": body["action"], "moved": moved, "refused": len(results) - moved, "results": items})


async def post_message(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "post_message")
    body = await json_body(request, required=("author", "text"))
    posted = await hub_of(request).threads.post_message(
        principal, request.path_params["thread_id"], body["author"], body["text"]
    )
    return JSONResponse(posted.to_json(), status_code=201)


async def proposals(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    service = hub_of(request).proposals
    if request.method == "POST":
        require(principal, "propose")
        body = await json_body(request, required=("kind", "statement", "rationale"))
        proposal = await service.propose(principal, body["kind"], body["statement"], body["rationale"])
        return JSONResponse(proposal.to_json(), status_code=201)
    require(principal, "list_proposals")
    found, next_cursor = await service.list(
        principal,
        state=query_str(request, "state", 20),
        limit=query_int(request, "limit", 50, 1, 200),
        cursor=query_str(request, "cursor", 64),
    )
    return JSONResponse({"proposals": [p.to_json() for p in found], "next_cursor": next_cursor})


async def approve(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "approve_proposal")
    await json_body(request, allow_empty=True)
    entry, duplicate = await hub_of(request).proposals.approve(principal, request.path_params["proposal_id"])
    return created_entry(entry, duplicate, hub_of(request).clock.now())


async def reject(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "reject_proposal")
    body = await json_body(request, required=("reason",))
    proposal = await hub_of(request).proposals.reject(principal, request.path_params["proposal_id"], body["reason"])
    return JSONResponse(proposal.to_json())


async def learning(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "read_learning")
    days = query_int(request, "days", DEFAULT_DAYS, 1, MAX_DAYS)
    hub = hub_of(request)
    now = hub.clock.now()
    report = await learning_report(hub.driver, principal.project, now, days)
    return JSONResponse(report.to_json(now))


P = "/v1/projects/{project}"

routes = [
    Route(f"{P}/entries/bulk", bulk_entries, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/retire", retire_entry, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/expiry", entry_expiry, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/correct", correct_entry, methods=["POST"]),
    Route(f"{P}/threads/{{thread_id}}/messages", post_message, methods=["POST"]),
    Route(f"{P}/proposals", proposals, methods=["GET", "POST"]),
    Route(f"{P}/proposals/{{proposal_id}}/approve", approve, methods=["POST"]),
    Route(f"{P}/proposals/{{proposal_id}}/reject", reject, methods=["POST"]),
    Route(f"{P}/learning", learning, methods=["GET"]),
]
