"""One error body for every refusal, whoever refuses: `{"error": {code, message}}`."""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.staticfiles import StaticFiles

from gateway.core.errors import GatewayError
from gateway.web.responses import JSONResponse

log = logging.getLogger("relayroom.web")

_HTTP_CODES = {
    400: ("malformed_request", "the request could not be read"),
    401: ("missing_credential", "send Authorization: Bearer <token>"),
    403: ("forbidden", "this credential may not do that"),
    404: ("not_found", "there is nothing at this path"),
    405: ("method_not_allowed", "this path does not accept that method"),
    413: ("body_too_large", "the request body is over the limit"),
    415: ("unsupported_media_type", "send a JSON body with Content-Type: application/json"),
    422: ("invalid_field", "the request is well-formed but invalid"),
    429: ("rate_limited", "too many requests; retry later"),
}


def error_response(status: int, code: str, message: str, *, extra: dict[str, Any] | None = None,
                   retry_after: int | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if extra:
        body.update(extra)
    out_headers = dict(headers or {})
    if retry_after is not None:
        out_headers["Retry-After"] = str(int(retry_after))
    return JSONResponse({"error": body}, status_code=status, headers=out_headers)


def gateway_error_response(exc: GatewayError) -> JSONResponse:
    headers = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="relayroom"'
    return error_response(exc.status, exc.code, exc.message, extra=exc.extra, retry_after=exc.retry_after,
                          headers=headers)


async def on_gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return gateway_error_response(exc)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code, message = _HTTP_CODES.get(exc.status_code, ("error", "the request was refused"))
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 404 and request.url.path.startswith("/mcp"):
        message = "no MCP endpoint at this path; use /mcp"
    if exc.status_code == 405:
        allow = allowed_methods(request) or headers.get("Allow")  # never an empty Allow
        if allow:
            headers["Allow"] = allow
    return error_response(exc.status_code, code, message, headers=headers)


_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(request: Request) -> str:
    """Every method some route serves at this path, for a 405's `Allow`.

    The router refuses with the methods of the first route whose pattern
    fits the path, but a path may be served by several routes (GET and POST
    of `/entries` are two), and `/entries/bulk` fits the pattern of
    `/entries/{entry_id}` before its own route: RFC 9110 wants them all.
    A mount names no methods; the static files' one serves GET and HEAD."""
    methods: set[str] = set()
    for route in getattr(request.app, "routes", ()):
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            served = getattr(route, "methods", None)
            if served is None and isinstance(getattr(route, "app", None), StaticFiles):
                served = ("GET", "HEAD")
            methods |= set(served or ())
    methods.discard(request.method)  # a route that fully matched would have answered
    rank = {method: i for i, method in enumerate(_METHOD_ORDER)}
    return ", ".join(sorted(methods, key=lambda m: (rank.get(m, len(rank)), m)))


async def on_client_disconnect(request: Request, exc: Exception) -> Response:
    # The client hung up, or was cut off by the body timeout of
    # gateway/web/http_limits.py, before its body arrived: nobody is left to
    # read an answer and the gateway did nothing wrong, so no traceback.  The
    # status (nginx's 499, "client closed request") is for the access log and
    # the metrics only; uvicorn drops the response.
    return error_response(499, "client_closed_request", "the client closed the connection before its request arrived")


async def on_unexpected(request: Request, exc: Exception) -> Response:
    # Never the exception's text: it may hold a query or a secret.
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "the gateway failed to answer; the error was logged")


EXCEPTION_HANDLERS = {
    GatewayError: on_gateway_error,
    HTTPException: on_http_exception,
    ClientDisconnect: on_client_disconnect,
    Exception: on_unexpected,
}
