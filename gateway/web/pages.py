"""`GET /projects/{p}/RELAYROOM.md`: the playbook agents read at the start of work.

Any token of the project (Bearer) or the owner's dashboard session may read
it.  The answer carries a strong `ETag`; `If-None-Match` with the current tag
answers 304 with no body, so agents can poll it cheaply.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.core.errors import NotFound, Unauthorized
from gateway.knowledge.model import Principal
from gateway.knowledge.playbook import etag, etag_matches, relayroom_md
from gateway.web.inputs import hub_of, principal_for
from gateway.web.session import SESSION_COOKIE, load_session

MEDIA_TYPE = "text/markdown; charset=utf-8"


async def _reader(request: Request, slug: str) -> Principal:
    if request.headers.get("authorization"):
        return await principal_for(request, slug)
    if request.cookies.get(SESSION_COOKIE):
        session = await load_session(request)
        if session is not None:
            if session.principal.project.slug != slug:
                raise NotFound(f"no project {slug!r}", code="project_not_found")
            return session.principal
    raise Unauthorized("send Authorization: Bearer <token> (any token of this project)", code="missing_credential")


async def relayroom(request: Request) -> Response:
    hub = hub_of(request)
    principal = await _reader(request, request.path_params["project"])
    # The principal's project was read with its token row in this request: its settings are current.
    document = await relayroom_md(hub.driver, principal.project, hub.clock.now())
    tag = etag(document)
    headers = {"ETag": tag, "Cache-Control": "private, no-cache", "Vary": "Authorization, Cookie"}
    if etag_matches(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return Response(document, media_type=MEDIA_TYPE, headers=headers)


routes = [Route("/projects/{project}/RELAYROOM.md", relayroom, methods=["GET", "HEAD"])]
