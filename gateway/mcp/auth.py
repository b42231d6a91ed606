"""Who is calling: the project token as the MCP bearer credential.

The SDK's bearer middleware asks `ProjectTokenVerifier` about every request;
no token or a bad one is HTTP 401 before any tool, resource or prompt runs.
The verified principal rides in the access token's claims, so a handler reads
it back (`current_principal`) without a second lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier

from gateway.core.errors import GatewayError, Unauthorized
from gateway.knowledge.model import LEVELS, Principal

if TYPE_CHECKING:
    from gateway.hub import Hub

_PRINCIPAL_CLAIM = "relayroom_principal"


class ProjectTokenVerifier(TokenVerifier):
    """A project token is a bearer credential: None (-> 401) unless it is
    known and not revoked."""

    def __init__(self, hub: Hub) -> None:
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


async def current_principal(hub: Hub) -> Principal:
    """The caller of the tool, resource or prompt being served."""
    token = get_access_token()
    if token is None or not token.claims:
        raise Unauthorized("send Authorization: Bearer <project token>", code="missing_credential")
    cached = token.claims.get(_PRINCIPAL_CLAIM)
    if isinstance(cached, Principal):
        return cached
    principal: Principal = await hub.accounts.project_principal(
        token.claims["project"], token.claims["principal"], token.claims["level"]
    )
    return principal
