"""Any other OIDC issuer (`provider: oidc`), bound by the exact `sub` of its tokens.

Such an issuer has no immutable id claim this gateway knows, so the binding
is the whole subject string, compared exactly.  When the binding lists
`refs`, the token must also carry a `ref` claim that is one of them.  An
issuer whose tokens carry a provider's immutable ids is never bound this
way (the check map validation and its conflicts refuse it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.ci.providers.base import Binding
from gateway.ci.providers.claims import not_bound, str_claim
from gateway.ci.providers.fields import VISIBLE, Fields
from gateway.ci.providers.issuers import issuer_location
from gateway.core.errors import Forbidden

MAX_SUBJECT = 1024


@dataclass(frozen=True, kw_only=True)
class GenericOidc(Binding):
    NAME = "oidc"
    LABEL = ""  # the pages name such a CI system by its host: "CI at ci.example.com"
    KEYS = frozenset({"issuer", "subject", "refs", "shared_with"})
    BINDS_BY = "subject"
    REFS_REQUIRED = False  # the exact subject carries what it scopes
    REQUIRED_CLAIMS = ("sub",)
    EVENTS = "every run whose token carries the subject"
    PROVENANCE_CLAIMS = ("sub", "ref", "sha", "run_id", "job_id", "workflow")

    subject: str

    @classmethod
    def read(cls, fields: Fields) -> dict[str, Any]:
        subject = fields.item.get("subject")
        if not isinstance(subject, str) or not VISIBLE.search(subject) or len(subject) > MAX_SUBJECT:
            fields.problem("subject", "subject is required: the exact `sub` claim this issuer puts in the tokens of "
                           "the runs that may vote")
        return {"subject": subject}

    def repository_key(self) -> str | None:
        assert self.issuer is not None
        return f"subject {self.subject!r} of {issuer_location(self.issuer)}"

    def identifies(self, claims: dict[str, Any]) -> bool:
        return str_claim(claims, "sub") == self.subject

    @classmethod
    def identity_mismatch(cls, bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
        """The subjects other bindings name are other projects' business: a token
        of an unbound subject hears only that it is not bound."""
        return not_bound("sub", repr(claims.get("sub")), "subject")

    def detail(self) -> str | None:
        return self.subject
