"""REST routes of the owner's side: thread messages, reflection proposals,
and the learning figures (docs/security.md, Limits)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.knowledge.permissions import require
from gateway.recall.learning import DEFAULT_DAYS, MAX_DAYS, learning_report
from gateway.knowledge.threads import Threads
from gateway.web.api import created_entry
from gateway.web.inputs import hub_of, json_body, principal_for, query_int, query_str
from gateway.web.responses import JSONResponse



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
    Route(f"{P}/threads/{{thread_id}}/messages", post_message, methods=["POST"]),
    Route(f"{P}/proposals", proposals, methods=["GET", "POST"]),
    Route(f"{P}/proposals/{{proposal_id}}/approve", approve, methods=["POST"]),
    Route(f"{P}/proposals/{{proposal_id}}/reject", reject, methods=["POST"]),
    Route(f"{P}/learning", learning, methods=["GET"]),
]
