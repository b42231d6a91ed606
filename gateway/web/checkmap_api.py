"""The check map's doors: the repository's CI publishes it, the owner reviews it.

    POST /v1/checkmaps                                        Bearer <OIDC JWT>, {project, path, content}
    GET  /v1/projects/{p}/checkmap                            owner: the map in force, and what waits
    POST /v1/projects/{p}/checkmap/pending/{sha256}/approve   owner
    POST /v1/projects/{p}/checkmap/pending/{sha256}/reject    owner, {reason?}

What they do is `gateway.ci.publish`; these handlers read the request and answer.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.ci.publish import read_publication
from gateway.knowledge.inputs import validate_text
from gateway.knowledge.inputs import MAX_EVIDENCE as MAX_REASON
from gateway.web.inputs import bearer, hub_of, json_body, principal_for
from gateway.web.responses import JSONResponse


async def publish(request: Request) -> Response:
    token = bearer(request)
    body = await json_body(request, required=("project", "path", "content"))
    status, answer = await hub_of(request).publications.publish(token, read_publication(body))
    return JSONResponse(answer, status_code=status)


async def checkmap(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    return JSONResponse((await hub_of(request).publications.view(principal)).to_json())


async def approve(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    await json_body(request, allow_empty=True)
    view = await hub_of(request).publications.approve(principal, request.path_params["sha256"])
    return JSONResponse(view.to_json())


async def reject(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    body = await json_body(request, optional=("reason",), allow_empty=True)
    reason = validate_text(body["reason"], "reason", MAX_REASON) if "reason" in body else None
    view = await hub_of(request).publications.reject(principal, request.path_params["sha256"], reason)
    return JSONResponse(view.to_json())


P = "/v1/projects/{project}/checkmap"

routes = [
    Route("/v1/checkmaps", publish, methods=["POST"]),
    Route(P, checkmap, methods=["GET"]),
    Route(f"{P}/pending/{{sha256}}/approve", approve, methods=["POST"]),
    Route(f"{P}/pending/{{sha256}}/reject", reject, methods=["POST"]),
]
