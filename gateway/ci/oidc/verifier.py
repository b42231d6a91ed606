"""From a bearer token to a verified credential bound to one project.

    peek (unverified: iss, kid, alg)   -> refuse malformed / off-list alg, no fetch
    bindings for exactly that iss      -> none: 401 unknown_issuer, no fetch
    the issuer's key for kid           -> cached; at most one refresh per 60 s
    jwt.decode, every option spelled   -> signature, iss, aud, required claims, times
    the provider's claim table         -> missing_claim
    bindings whose immutable ids match -> none: 403 binding_mismatch
    the body's project, if any         -> picks among projects; else 403 project_mismatch
    the provider's run policy          -> 403 event_not_allowed / binding_mismatch

Each provider is a class (`gateway.ci.providers`): its bindings say which
tokens are theirs and which runs may vote.  The issuer identity comes from
the verified `iss` and the project, never from the request body or the
provider label.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from gateway.ci.checkmaps.registry import Snapshot
from gateway.ci.oidc import token as jwt_token
from gateway.ci.oidc.fetch import url_allowed
from gateway.ci.oidc.keys import KeyCache
from gateway.ci.providers.base import Binding
from gateway.ci.providers.claims import first_missing, missing_claim
from gateway.ci.providers.workflows import WorkflowRef
from gateway.core.clock import Clock
from gateway.core.errors import Forbidden, GatewayError, Invalid, Unauthorized
from gateway.store.queries.attestations import Replay

log = logging.getLogger("relayroom.oidc")


@dataclass(frozen=True)
class Credential:
    """What a verified CI token says, bound to one project by one binding."""

    issuer: str  # the issuer identity, oidc:<host[:port]>:<project>
    issuer_url: str
    project: str
    binding: Binding
    jti: str
    expires_at: float
    workflow: WorkflowRef | None
    home_repository: str | None
    provenance: dict[str, Any] = field(default_factory=dict)
    claims: dict[str, Any] = field(default_factory=dict)  # verified; a publication is judged on them again

    @property
    def replay(self) -> Replay:
        """The token's replay key, spent by whichever door takes it, kept until it expires."""
        return Replay(True, self.issuer_url, self.jti, self.expires_at + jwt_token.LEEWAY_SECONDS)


class TokenVerifier:
    def __init__(
        self,
        *,
        keys: KeyCache,
        snapshot: Callable[[], Snapshot],
        clock: Clock,
        audience: str,
        allow_insecure: bool,
    ) -> None:
        self.keys = keys
        self.snapshot = snapshot
        self.clock = clock
        self.audience = audience
        self.allow_insecure = allow_insecure

    async def verify(self, token: str, project: str | None = None) -> Credential:
        peeked = jwt_token.peek(token)
        bindings = list(self.snapshot().oidc.get(peeked.issuer, ()))
        if not bindings:
            raise Unauthorized(
                f"no check map binds the issuer {_shown(peeked.issuer)}; add a binding for it to the project's check map",
                code="unknown_issuer",
            )
        if not url_allowed(peeked.issuer, self.allow_insecure):
            raise Unauthorized(
                f"the issuer {peeked.issuer} is not https; plain http issuers are contacted only on loopback with "
                "RELAYROOM_ALLOW_INSECURE_ISSUERS=1",
                code="unknown_issuer",
            )
        key = await self.keys.key_for(peeked.issuer, peeked.kid)
        claims = jwt_token.decode(token, key, issuer=peeked.issuer, audience=self.audience, now=self.clock.now(),
                                  peeked=peeked)
        binding = self.select(bindings, claims, project)
        provider = type(binding)
        exp = float(claims["exp"])
        return Credential(
            issuer=binding.identity,
            issuer_url=peeked.issuer,
            project=binding.project,
            binding=binding,
            jti=claims["jti"],
            expires_at=exp,
            workflow=provider.workflow_of(claims),
            home_repository=provider.home(claims),
            provenance={"issuer": peeked.issuer, "provider": binding.provider, **provider.provenance(claims)},
            claims=claims,
        )

    def select(self, bindings: list[Binding], claims: dict[str, Any], project: str | None) -> Binding:
        """The binding of `bindings` (those of the token's issuer) that lets
        this verified token's run vote, or the refusal of 5.1."""
        if not bindings:
            raise Forbidden("no check map binds this run's issuer for this project", code="binding_mismatch")
        by_provider: dict[type[Binding], list[Binding]] = {}
        for binding in bindings:
            by_provider.setdefault(type(binding), []).append(binding)
        identified: list[Binding] = []
        refusals: list[GatewayError] = []
        for provider, group in by_provider.items():
            missing = first_missing(claims, provider.REQUIRED_CLAIMS)
            if missing is not None:
                refusals.append(missing_claim(missing, provider.NAME))
                continue
            matched = [b for b in group if b.identifies(claims)]
            if matched:
                identified.extend(matched)
            else:
                refusals.append(provider.identity_mismatch(group, claims))
        if not identified:
            # The caller hears only that nothing binds its token; which bindings it
            # missed (their ids, projects, files) is for the operator's log.
            log.info("oidc token of %s matched no binding (%s); bindings of this issuer: %s",
                     _shown(peeked_issuer(claims)), refusals[0].message,
                     "; ".join(f"{b.provider} {b.where()} project {b.project} {b.repository_key()}"
                               for b in bindings[:20]))
            raise refusals[0]
        if project is not None:
            mine = [b for b in identified if b.project == project]
            if not mine:
                log.info("oidc token asked for project %s; its bindings serve %s", _shown(project),
                         ", ".join(sorted({b.project for b in identified})))
                raise Forbidden(
                    f"this token is not bound to project {_shown(project)}; the project comes from the credential "
                    "and the check maps",
                    code="project_mismatch",
                )
            identified = mine
        projects = sorted({b.project for b in identified})
        if len(projects) > 1:
            # The check maps hold only repositories shared both ways, so each of these
            # projects consented to the others; the filter keeps that so whatever loaded.
            shared = [p for p in projects if all(p == b.project or p in b.shared_with for b in identified)]
            raise Invalid(
                f"this token's repository is shared by several projects ({', '.join(shared) or 'not named'}); name "
                "one in the body's project field",
                code="project_required",
            )
        first_refusal: GatewayError | None = None
        for binding in identified:
            try:
                binding.authorize(claims)
            except GatewayError as refusal:
                first_refusal = first_refusal or refusal
                continue
            return binding
        assert first_refusal is not None
        raise first_refusal


def peeked_issuer(claims: dict[str, Any]) -> str:
    value = claims.get("iss")
    return value if isinstance(value, str) else "?"


def _shown(value: str) -> str:
    return repr(value if len(value) <= 100 else value[:97] + "...")
