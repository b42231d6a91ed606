"""The MCP door: recall, learn, recall_used and report_error for agents.

Built on the official `mcp` SDK (2.x), Streamable HTTP at /mcp, stateless and
with JSON responses so any number of gateway processes can serve one client
(nothing about a client lives in a process's memory).  The project tokens are
the bearer credentials, checked by the SDK's token verifier: no token or a bad
one is HTTP 401 before any tool runs.  Each tool calls the same core functions
as the REST routes (`gateway.mcp.tools`); the playbook and entries are
resources and `before_task` a prompt (`gateway.mcp.context`).  Refusals reach
the agent in the gateway's error shape (`gateway.mcp.errors`).

The SDK's own refusals (401, the Host/Origin checks' 421/403, an oversized
body) come as plain text or OAuth-style JSON; `ContractErrorBodies` rewrites
them into the contract's one error body, keeping status and headers (the
`WWW-Authenticate` challenge stays).  JSON-RPC errors pass untouched.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from mcp.server import MCPServer
from mcp.server._otel import OpenTelemetryMiddleware  # the SDK's documented opt-out: drop it from `middleware`
from mcp.server.auth.settings import AuthSettings
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp import MCPError
from mcp.types import CallToolResult, GetPromptResult, InputRequiredResult
from opentelemetry import trace
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import __version__
from gateway.accounts.tokens import placeholder_message
from gateway.mcp.auth import ProjectTokenVerifier
from gateway.mcp.errors import prompt_error, tool_error_result, unknown_arguments, unknown_resource
from gateway.core.jsonio import API_BODY_LIMIT

if TYPE_CHECKING:
    from gateway.hub import Hub

INSTRUCTIONS = (
    "RelayRoom keeps this project's durable knowledge (conventions, pitfalls, decisions, facts) behind a "
    "trust gate. Read the resource relayroom://RELAYROOM.md at the start of a session. Before non-trivial work, "
    "call recall with what you are about to do (the prompt before_task does it for a task); call recall_used "
    "for each recalled entry that shaped your work; call report_error when a recalled entry proved wrong; "
    "call learn when you discover something durable that recall did not return (it stays a candidate, "
    "visible only to you, until CI checks or the project owner confirm it)."
)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class GatewayMCPServer(MCPServer[Any]):
    """The SDK's server, with refusals an agent can read.

    `call_tool` is the SDK's one entry for a tool call; every refusal on the
    way (an unknown tool, arguments that fail the schema, the gateway's own
    errors) arrives here as a ToolError and leaves as one tool error in the
    gateway's error shape (`gateway.mcp.errors`)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is not None and isinstance(arguments, dict):
            # The SDK's argument models ignore what they do not name: a typo
            # (`ttl_day`) would be lost without a word, and `state="trusted"`
            # would read as if it had been considered.  Refused before the tool
            # runs, so nothing changes.
            refusal = unknown_arguments(name, arguments, tool.parameters)
            if refusal is not None:
                return refusal
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            return tool_error_result(name, exc, (tool.name for tool in self._tool_manager.list_tools()))

    async def read_resource(self, uri: Any, context: Context[Any, Any] | None = None) -> Any:
        try:
            return await super().read_resource(uri, context)
        except ResourceNotFoundError:
            templates = [t.uri_template for t in self._resource_manager.list_templates()]
            names = [str(r.uri) for r in self._resource_manager.list_resources()] + templates
            raise unknown_resource(str(uri), names) from None

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        try:
            return await super().get_prompt(name, arguments, context)
        except MCPError:
            raise
        except ValueError as exc:
            # Otherwise a missing argument is an "Internal server error" with a traceback in the log.
            raise prompt_error(name, exc, (prompt.name for prompt in self._prompt_manager.list_prompts())) from None


def allowed_hosts_and_origins(public_hosts: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Loopback on any port, plus each configured public host (any port when
    it is given without one) and its https/http origins."""
    hosts: list[str] = []
    origins: list[str] = []
    for host in LOOPBACK_HOSTS:
        hosts += [host, f"{host}:*"]
        origins += [f"http://{host}", f"http://{host}:*", f"https://{host}", f"https://{host}:*"]
    for raw in public_hosts:
        host = raw.strip().lower()
        if not host:
            continue
        hosts.append(host)
        origins += [f"https://{host}", f"http://{host}"]
        if not _has_port(host):
            hosts.append(f"{host}:*")
            origins += [f"https://{host}:*", f"http://{host}:*"]
    return hosts, origins


def _has_port(host: str) -> bool:
    if host.startswith("["):
        return "]:" in host
    return ":" in host


def transport_security(public_hosts: tuple[str, ...]) -> TransportSecuritySettings:
    hosts, origins = allowed_hosts_and_origins(public_hosts)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


_REFUSALS = {
    400: ("malformed_request", "the MCP request is malformed: POST JSON-RPC with Content-Type: application/json"),
    401: ("missing_credential", "send Authorization: Bearer <project token>"),
    403: ("forbidden_origin", "this Origin may not call the gateway's MCP endpoint"),
    404: ("not_found", "there is nothing at this path"),
    405: ("method_not_allowed", "this method is not allowed on /mcp"),
    406: ("not_acceptable", "send Accept: application/json, text/event-stream"),
    413: ("body_too_large", f"the body is over the {API_BODY_LIMIT // 1024} KiB limit"),
    415: ("unsupported_media_type", "send a JSON-RPC body with Content-Type: application/json"),
    421: ("misdirected_host", "this Host is not one the gateway serves; add it to RELAYROOM_PUBLIC_HOSTS"),
}


class ContractErrorBodies:
    """Rewrite the SDK's non-JSON-RPC refusals into `{"error": {code, message}}`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] in _REFUSALS:
                    held["start"] = message
                    return
                await send(message)
                return
            if message["type"] == "http.response.body" and "start" in held:
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                await _send_rewritten(send, held["start"], b"".join(chunks), _credential(scope))
                return
            await send(message)

        await self.app(scope, receive, capture)


def _credential(scope: Scope) -> str | None:
    """The bearer token the request carried ("" for an Authorization header
    of another form), None when it carried no Authorization header."""
    for key, value in scope.get("headers", []):
        if key.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


async def _send_rewritten(send: Send, start: Message, body: bytes, credential: str | None) -> None:
    status = start["status"]
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    challenge: bytes | None = None
    if isinstance(parsed, dict) and (isinstance(parsed.get("error"), dict) or "jsonrpc" in parsed):
        new_body = body  # already the contract's shape, or a JSON-RPC error: leave it
    else:
        code, message = _REFUSALS[status]
        if status == 401 and credential is not None:
            # The SDK answers "invalid_token" for both a missing and an unknown
            # token; whether a header came tells them apart.
            unexpanded = placeholder_message(credential)
            code, message = "invalid_token", unexpanded or "the bearer token is not valid for this gateway (unknown or revoked)"
            # Some clients show only the challenge's description, not the body.
            challenge = f'Bearer error="invalid_token", error_description="{message}"'.encode("latin-1", "replace")
        new_body = json.dumps({"error": {"code": code, "message": message}}).encode()
    dropped = (b"content-length", b"content-type") + ((b"www-authenticate",) if challenge else ())
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in dropped]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(new_body)).encode())]
    if challenge:
        headers.append((b"www-authenticate", challenge))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": new_body})


def build_mcp_app(hub: Hub) -> tuple[ASGIApp, StreamableHTTPSessionManager]:
    from gateway.mcp.context import register_context
    from gateway.mcp.tools import register_tools

    server = GatewayMCPServer(
        "relayroom",
        version=__version__,  # what a client shows in serverInfo; empty tells it nothing
        instructions=INSTRUCTIONS,
        token_verifier=ProjectTokenVerifier(hub),
        auth=AuthSettings(
            # Required by the SDK's settings model, never contacted: the
            # gateway issues no OAuth tokens, project tokens are the bearer.
            issuer_url=AnyHttpUrl("https://auth.invalid"),
            resource_server_url=None,
            required_scopes=["read"],
        ),
    )
    register_tools(server, hub)
    for tool in server._tool_manager.list_tools():
        tool.parameters["additionalProperties"] = False  # published as call_tool enforces it
    register_context(server, hub)
    if not tracing_configured(trace.get_tracer_provider()):
        untraced(server)
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        max_request_body_size=API_BODY_LIMIT,
        transport_security=transport_security(hub.config.public_hosts),
    )
    return ContractErrorBodies(endpoint_of(app, "/mcp")), server.session_manager


def tracing_configured(provider: trace.TracerProvider) -> bool:
    """Whether `provider` (the process's OpenTelemetry tracer provider) is
    one an operator installed: the API's proxy or no-op provider records
    nothing."""
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def untraced(server: MCPServer[Any]) -> None:
    """Leave out the SDK's OpenTelemetry middleware.

    It wraps every MCP message in a span, and with no OpenTelemetry SDK in
    the process the span records nothing but still costs server time on
    every tool call (docs/decisions/0008). `build_mcp_app` decides once, when the app is
    built: a process that installs a tracer provider before that (as
    `opentelemetry-instrument relayroom serve` does) keeps the SDK's spans."""
    server.middleware[:] = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]


def endpoint_of(sdk_app: Starlette, path: str) -> ASGIApp:
    """The SDK app's `path` endpoint wrapped in the SDK app's own middleware
    (the bearer check and the access-token context), without the Starlette
    app around them.

    The gateway's app already routes `/mcp`, catches errors and maps
    exceptions; the SDK's app would do all three again on every call, a
    second error middleware, exception middleware and router per tool call.
    Taken from the SDK's app rather than rebuilt, so whatever it configures
    (the verifier, the required scopes) is what runs."""
    from starlette.routing import Route

    routes = [r for r in sdk_app.routes if isinstance(r, Route) and r.path == path]
    if len(routes) != 1:
        raise RuntimeError(f"the MCP SDK's app has {len(routes)} routes at {path}, expected one")
    endpoint = routes[0].app
    for middleware in reversed(sdk_app.user_middleware):
        cls, args, kwargs = middleware
        endpoint = cls(endpoint, *args, **kwargs)
    return endpoint
