"""Pure ASGI middleware: header limits before anything else, request ids, access log."""

from __future__ import annotations

import logging
import os
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core.logs import REQUEST_FACTS, REQUEST_ID
from gateway.core.metrics import Metrics
from gateway.web.errors import error_response

log = logging.getLogger("relayroom.access")

MAX_AUTH_HEADER = 16 * 1024
MAX_HEADERS_TOTAL = 64 * 1024


class GuardMiddleware:
    """Refuses oversize headers before any route, token check or crypto runs,
    tags each request with an id, and writes one access-log line (path and
    status, never a header value, and the facts the route noted)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        total = 0
        for name, value in scope.get("headers", []):
            total += len(name) + len(value)
            if name == b"authorization" and len(value) > MAX_AUTH_HEADER:
                response = error_response(
                    431, "header_too_large", "the Authorization header is over the 16 KiB limit"
                )
                await response(scope, receive, send)
                return
        if total > MAX_HEADERS_TOTAL:
            response = error_response(431, "header_too_large", "the request headers are over the 64 KiB limit")
            await response(scope, receive, send)
            return
        request_id = os.urandom(8).hex()  # 16 hex characters, as before, without a UUID object
        scope.setdefault("state", {})["request_id"] = request_id
        request_token = REQUEST_ID.set(request_id)
        facts: dict[str, object] = {}
        facts_token = REQUEST_FACTS.set(facts)
        started = time.perf_counter()
        status_holder = [500]

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = dict(message)
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(request_token)
            REQUEST_FACTS.reset(facts_token)
            elapsed = time.perf_counter() - started
            route = _route_template(scope)
            self.metrics.observe_request(scope.get("method", ""), route, status_holder[0], elapsed)
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "request",
                    extra={
                        **facts,  # what the route noted (`gateway.core.logs.note`), whitelisted by the formatter
                        "request_id": request_id,
                        "method": scope.get("method"),
                        "route": route,
                        "status": status_holder[0],
                        "ms": round(elapsed * 1000, 2),
                    },
                )


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and path:
        return path
    raw = scope.get("path", "")
    return "/mcp" if raw.startswith("/mcp") else "unmatched"
