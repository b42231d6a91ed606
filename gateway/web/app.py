"""The ASGI application: every door of the gateway in one process.

Route modules each own a list of `routes`; this file only assembles them
around a hub (the composition root, `gateway/hub.py`, builds every service).
The MCP app is routed at `/mcp`.
"""

from __future__ import annotations

import contextlib
import gc
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route

from gateway.core.config import Config
from gateway.hub import Hub
from gateway.web import api, api_docs, attest, checkmap_api, dashboard, health, openapi, owner_api, pages
from gateway.web.errors import EXCEPTION_HANDLERS
from gateway.web.middleware import GuardMiddleware

# The router tries routes in order: CI attestations, the hottest write path,
# come right after the cheap health routes.
ROUTE_MODULES = (health, attest, checkmap_api, api, owner_api, pages, dashboard, openapi, api_docs)


def app_from_env() -> Starlette:
    """The uvicorn factory used by `relayroom serve` (every worker builds its own)."""
    from gateway.core.allocator import cap_arenas
    from gateway.core.logs import configure_logging

    cap_arenas()  # each worker process sets its own
    config = Config.from_env()
    configure_logging(config.log_level, config.log_format)
    app = build_app(Hub(config))
    # What is built at start lives as long as the process: keep it out of the
    # collector's full passes, which showed as latency spikes, and collect
    # young objects ten times more rarely (docs/decisions/0003).
    gc.collect()
    gc.freeze()
    gc.set_threshold(7000, 10, 10)
    return app


def build_app(hub: Hub | None = None, *, config: Config | None = None, manage_hub: bool = True) -> Starlette:
    """Build the app around `hub` (or a hub from `config`/the environment).

    With `manage_hub` the app's lifespan starts and stops the hub; tests that
    drive the hub themselves pass False.
    """
    hub = hub or Hub(config or Config.from_env())
    routes: list[BaseRoute] = [route for module in ROUTE_MODULES for route in module.routes]

    from gateway.mcp.server import build_mcp_app

    mcp_app, session_manager = build_mcp_app(hub)
    # A Route (not a Mount at "/") so that every other path keeps the
    # router's own 404/405 answers; the SDK app still sees path /mcp.  First,
    # so an agent's every call does not try the other routes' patterns.
    routes.insert(0, Route("/mcp", endpoint=mcp_app))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_hub:
            await hub.start(serve=True)
        try:
            async with session_manager.run():
                yield
        finally:
            if manage_hub:
                await hub.stop()

    app = Starlette(
        routes=routes,
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[Middleware(GuardMiddleware, metrics=hub.metrics)],
        lifespan=lifespan,
    )
    app.state.hub = hub
    app.state.session_manager = session_manager
    return app
