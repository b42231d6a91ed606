"""Liveness, readiness and metrics: no credential, nothing secret."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.web.responses import JSONResponse
from gateway.web.inputs import hub_of


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    hub = hub_of(request)
    store_ok = await hub.driver.ping()
    maps = hub.checkmaps.status()
    ready = store_ok and hub.started
    status = hub.recall.status
    body = {
        "ready": ready,
        "store": "ok" if store_ok else "unavailable",
        "checkmaps": maps,
        "recall": {"ranking": status.ranking, "detail": status.detail},
    }
    return JSONResponse(body, status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    hub = hub_of(request)
    return Response(hub.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
]
