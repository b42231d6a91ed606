"""Any other sender with a shared secret (`provider: webhook`): the Standard
Webhooks scheme, `POST /v1/webhooks/{source}`.

A source is bound by its name and the secret in the environment variable
`secret_env` names: whoever holds the secret speaks for the source.  It has
no token, so no ref, workflow or event to judge: the sender vouches for its
runs, and the check map's reviewer vouches for the sender.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Hashable

from gateway.ci.providers.base import Binding
from gateway.ci.providers.fields import Fields

SOURCE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
RESERVED = ("github",)  # /v1/webhooks/github is GitHub's door


@dataclass(frozen=True, kw_only=True)
class StandardWebhook(Binding):
    NAME = "webhook"
    LABEL = "Webhook"
    KEYS = frozenset({"source", "secret_env"})
    BINDS_BY = "secret"
    OIDC = False
    EVENTS = "whatever the holder of the secret signs"

    source: str
    secret_env: str

    @classmethod
    def read(cls, fields: Fields) -> dict[str, Any]:
        source = fields.item.get("source")
        if not isinstance(source, str) or not SOURCE.fullmatch(source):
            fields.problem("source", "source must be a name such as nightly-canary (^[a-z0-9][a-z0-9._-]{0,62}$)")
        elif source in RESERVED:
            fields.problem("source", f"source {source} is taken by /v1/webhooks/{source}; pick another name")
        return {"source": source, "secret_env": fields.env_name("secret_env", required=True)}

    def secret_names(self) -> tuple[str, ...]:
        return (self.secret_env,)

    def lookup_keys(self) -> tuple[Hashable, ...]:
        return (source_key(self.source),)

    @property
    def identity(self) -> str:
        return f"webhook:{self.source}:{self.project}"

    def detail(self) -> str | None:
        return self.source


def source_key(source: str) -> Hashable:
    """How the Standard Webhooks door finds the bindings of `/v1/webhooks/{source}`."""
    return ("webhook source", source)
