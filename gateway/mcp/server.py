"""The MCP door: recall, learn, recall_used and report_error for agents.

Built on the official `mcp` SDK (2.x), Streamable HTTP at /mcp, stateless and
with JSON responses so any number of gateway processes can serve one client
(nothing about a client lives in a process's memory).  The project tokens are
the bearer credentials, checked by the SDK's token verifier: no token or a bad
one is HTTP 401 before any tool runs.  Each tool calls the same core functions
as the REST routes (`gateway.mcp.tools`).

The SDK's own refusals (401, the Host/Origin checks' 421/403, an oversized
body) come as plain text or OAuth-style JSON; `ContractErrorBodies` rewrites
them into the contract's one error body, keeping status and headers (the
`WWW-Authenticate` challenge stays).  JSON-RPC errors pass untouched.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from gateway import __version__
from gateway.core.errors import GatewayError
from gateway.knowledge.model import LEVELS, Principal
from gateway.web.inputs import API_BODY_LIMIT

INSTRUCTIONS = (
    "RelayRoom keeps this project's durable knowledge (conventions, pitfalls, decisions, facts) behind a "
    "trust gate. Call recall with what you are about to do before non-trivial work; call recall_used for "
    "each recalled entry that shaped your work; call report_error when a recalled entry proved wrong; call "
    "learn when you discover something durable (it stays a candidate, visible only to you, until CI checks "
    "or the project owner confirm it)."
)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")

_PRINCIPAL_CLAIM = "relayroom_principal"


class ProjectTokenVerifier(TokenVerifier):
    """A project token is a bearer credential: None (-> 401) unless it is
    known and not revoked.  The verified principal rides in the token's
    claims so a tool does not look it up a second time."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await self.hub.accounts.authenticate(token)
        except GatewayError:
            return None
        rank = LEVELS.index(principal.level) if principal.level in LEVELS else 0
        return AccessToken(
            token="",  # the secret is not kept in the request context
            client_id=principal.project.slug,
            subject=f"{principal.project.slug}:{principal.name}",
            scopes=list(LEVELS[: rank + 1]),
            claims={
                "project": principal.project.slug,
                "principal": principal.name,
                "level": principal.level,
                _PRINCIPAL_CLAIM: principal,
            },
        )


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

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Any) -> None:
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
                await _send_rewritten(send, held["start"], b"".join(chunks), _has_authorization(scope))
                return
            await send(message)

        await self.app(scope, receive, capture)


def _has_authorization(scope: Any) -> bool:
    return any(k.lower() == b"authorization" for k, _ in scope.get("headers", []))


async def _send_rewritten(send: Any, start: Any, body: bytes, sent_credential: bool) -> None:
    status = start["status"]
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and (isinstance(parsed.get("error"), dict) or "jsonrpc" in parsed):
        new_body = body  # already the contract's shape, or a JSON-RPC error: leave it
    else:
        code, message = _REFUSALS[status]
        if status == 401 and sent_credential:
            # The SDK answers "invalid_token" for both a missing and an unknown
            # token; whether a header came tells them apart.
            code, message = "invalid_token", "the bearer token is not valid for this gateway (unknown or revoked)"
        new_body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(new_body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": new_body})


def build_mcp_app(hub: Any) -> tuple[Any, Any]:
    from gateway.mcp.tools import _tool_error, register_tools

    server = MCPServer(
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

    async def caller() -> Principal:
        token = get_access_token()
        if token is None or not token.claims:
            raise ToolError("missing_credential: send Authorization: Bearer <project token>")
        cached = token.claims.get(_PRINCIPAL_CLAIM)
        if isinstance(cached, Principal):
            return cached
        try:
            return await hub.accounts.project_principal(token.claims["project"], token.claims["principal"], token.claims["level"])
        except GatewayError as exc:
            raise _tool_error(exc) from None

    register_tools(server, hub, caller)
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        max_request_body_size=API_BODY_LIMIT,
        transport_security=transport_security(hub.config.public_hosts),
    )
    return ContractErrorBodies(app), server.session_manager
