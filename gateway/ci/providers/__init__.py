"""The CI providers a check map may name, one module each, in one table.

`PROVIDERS` maps a map's `provider:` to the provider's class (a `Binding`
subclass, `base.py`: the interface every rule asks).  Adding a provider is a
new module with its class and one line below; nothing else names providers.
"""

from __future__ import annotations

from gateway.ci.providers.base import Binding, RunFacts
from gateway.ci.providers.github import GitHubActions
from gateway.ci.providers.gitlab import GitLab
from gateway.ci.providers.oidc import GenericOidc
from gateway.ci.providers.webhook import StandardWebhook

PROVIDERS: dict[str, type[Binding]] = {cls.NAME: cls for cls in (GitHubActions, GitLab, GenericOidc, StandardWebhook)}

__all__ = ["Binding", "PROVIDERS", "RunFacts", "id_issuers"]


def id_issuers() -> tuple[str, ...]:
    """The issuers whose tokens carry a provider's immutable ids wherever
    they appear: never bound by `sub`."""
    return tuple(issuer for cls in PROVIDERS.values() if cls.BINDS_BY == "ids" for issuer in cls.ID_ISSUERS)
