"""The MCP door: recall, learn, recall_used and report_error for agents.

Built on the official `mcp` SDK (2.x), Streamable HTTP at /mcp, stateless and
with JSON responses so any number of gateway processes can serve one client.
The project tokens are the bearer credentials; each tool calls the same core
functions as the REST routes.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from gateway.errors import GatewayError
from gateway.model import Principal


class ProjectTokenVerifier(TokenVerifier):
    def __init__(self, hub: Any) -> None:
        self.hub = hub

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await self.hub.accounts.authenticate(token)
        except GatewayError:
            return None
        return AccessToken(
            token="",  # the secret is not kept in the request context
            client_id=principal.project.slug,
            subject=f"{principal.project.slug}:{principal.name}",
            scopes=["read"],
            claims={"project": principal.project.slug, "principal": principal.name, "level": principal.level},
        )


def _security(hub: Any) -> TransportSecuritySettings:
    hosts = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    for host in hub.config.public_hosts:
        hosts.append(host)
        if ":" not in host:
            hosts.append(f"{host}:*")
        origins.extend([f"https://{host}", f"http://{host}"])
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def build_mcp_app(hub: Any) -> tuple[Any, Any]:
    server = MCPServer(
        "relayroom",
        instructions=(
            "Project knowledge behind a trust gate. Call recall before non-trivial work; learn when you find "
            "something durable (it stays a candidate until CI or an owner confirms it); report_error when a "
            "recalled entry proved wrong; recall_used when a recalled entry shaped your work."
        ),
        token_verifier=ProjectTokenVerifier(hub),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl("https://auth.invalid"),
            resource_server_url=None,
            required_scopes=["read"],
        ),
    )

    async def caller() -> Principal:
        token = get_access_token()
        if token is None:
            raise ToolError("no credential: send Authorization: Bearer <project token>")
        try:
            return await hub.accounts.project_principal(token.claims["project"], token.claims["principal"], token.claims["level"])
        except GatewayError as exc:
            raise ToolError(exc.message) from None

    from gateway.mcp_tools import register_tools

    register_tools(server, hub, caller)
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=_security(hub),
    )
    return app, server.session_manager
