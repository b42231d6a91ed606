"""`GET /openapi.json`: the API described as OpenAPI 3 (see gateway/web/openapi_spec.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.web.responses import JSONResponse


async def openapi(request: Request) -> Response:
    from gateway.web.openapi_spec import spec

    return JSONResponse(spec())


routes = [Route("/openapi.json", openapi, methods=["GET"])]
