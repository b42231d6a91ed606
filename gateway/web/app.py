"""The ASGI application: every door of the gateway in one process.

Route modules each own a list of `routes` and may define `setup(hub)` to hang
start/stop hooks or services on the hub; this file only assembles them.  The
MCP app is mounted last, at "/", as the SDK expects (it serves `/mcp`).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from gateway.config import Config
from gateway.hub import Hub
from gateway.web.errors import EXCEPTION_HANDLERS
from gateway.web.middleware import GuardMiddleware

ROUTE_MODULES = (
    "gateway.web.health",
    "gateway.web.api",
    "gateway.web.owner_api",
    "gateway.web.attest",
    "gateway.web.pages",
    "gateway.web.dashboard",
    "gateway.web.openapi",
)


def _only_mcp(mcp_app: Any) -> Any:
    """The SDK's app serves /mcp; anything else that reaches it gets the
    gateway's JSON 404 rather than the SDK's plain-text one."""
    from gateway.web.errors import error_response

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") not in ("/mcp", "/mcp/"):
            await error_response(404, "not_found", "there is nothing at this path")(scope, receive, send)
            return
        await mcp_app(scope, receive, send)

    return app


def app_from_env() -> Starlette:
    """The uvicorn factory used by `relayroom serve` (every worker builds its own)."""
    from gateway.logs import configure_logging

    config = Config.from_env()
    configure_logging(config.log_level)
    return build_app(Hub(config))


def build_app(hub: Hub | None = None, *, config: Config | None = None, manage_hub: bool = True) -> Starlette:
    """Build the app around `hub` (or a hub from `config`/the environment).

    With `manage_hub` the app's lifespan starts and stops the hub; tests that
    drive the hub themselves pass False.
    """
    hub = hub or Hub(config or Config.from_env())
    routes: list[Any] = []
    for name in ROUTE_MODULES:
        module = importlib.import_module(name)
        setup = getattr(module, "setup", None)
        if setup is not None:
            setup(hub)
        routes.extend(getattr(module, "routes", []))

    from gateway.mcp_server import build_mcp_app

    mcp_app, session_manager = build_mcp_app(hub)
    routes.append(Mount("/", app=_only_mcp(mcp_app)))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_hub:
            await hub.start()
        try:
            async with session_manager.run():
                yield
        finally:
            if manage_hub:
                await hub.stop()

    app = Starlette(
        routes=routes,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        middleware=[Middleware(GuardMiddleware, metrics=hub.metrics)],
        lifespan=lifespan,
    )
    app.state.hub = hub
    app.state.session_manager = session_manager
    return app
