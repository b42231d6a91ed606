"""Small pure helpers the provider modules share: reading a claim as an id
or a string, and the refusals that name the claim, what the check map
expects and what the credential carried (never the credential itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.errors import Forbidden, Unauthorized


@dataclass(frozen=True)
class Refusal:
    """Why a run may not vote: `code` is the contract's error code
    (event_not_allowed, binding_mismatch), `claim` the claim it is about."""

    code: str
    claim: str
    message: str

    def error(self) -> Forbidden:
        return Forbidden(self.message, code=self.code, extra={"claim": self.claim})


def ref_type_fits(refs: tuple[str, ...] | None, ref: str | None, ref_type: str | None) -> bool:
    """A listed `refs/heads/X` is a branch and `refs/tags/X` a tag: a tag named
    main never passes as the branch main.  `"*"` takes any ref of any type."""
    if refs is not None and "*" in refs:
        return True
    if ref_type is None:  # the door cannot tell (see RunFacts.ref_type)
        return True
    if ref is None:
        return False
    if ref.startswith("refs/heads/"):
        return ref_type == "branch"
    if ref.startswith("refs/tags/"):
        return ref_type == "tag"
    return True


def id_claim(claims: dict[str, Any], name: str) -> str | None:
    """An immutable id claim as a string ("123456"); ints are accepted, bools never."""
    value = claims.get(name)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value else None


def str_claim(claims: dict[str, Any], name: str) -> str | None:
    value = claims.get(name)
    return value if isinstance(value, str) else None


def first_missing(claims: dict[str, Any], required: tuple[str, ...]) -> str | None:
    for name in required:
        value = claims.get(name)
        if value is None or value == "" or isinstance(value, (dict, list, bool)):
            return name
    return None


def missing_claim(name: str, provider: str) -> Unauthorized:
    return Unauthorized(f"the token has no usable {name} claim, which {provider} tokens carry", code="missing_claim",
                        extra={"claim": name})


def shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:197] + "..."


def mismatch(claim: str, expected: str, carried: Any, where: str) -> Forbidden:
    """Only for a token of the binding's own repository or project: it names
    what the binding expects and where."""
    return mismatched(claim, expected, carried, where).error()


def mismatched(claim: str, expected: str, carried: Any, where: str) -> Refusal:
    return Refusal("binding_mismatch", claim,
                   f"{claim}: the check map ({where}) expects {expected}; the credential carried {shown(carried)}")


def not_bound(claim: str, carried: Any, what: str) -> Forbidden:
    """A token no binding of this issuer identifies: it learns that, and
    nothing of the bindings, projects or files it did not match."""
    return Forbidden(f"no check map binds this {what} ({claim} {shown(carried)})", code="binding_mismatch",
                     extra={"claim": claim})


def ref_listed(refs: tuple[str, ...] | None, ref: str | None) -> bool:
    if refs is None or ref is None:
        return False
    return "*" in refs or ref in refs


def object_id(value: Any) -> str | None:
    """The numeric `id` of a webhook object as a string (bools and negatives never):
    how a `workflow_run` payload names repositories and owners."""
    if not isinstance(value, dict):
        return None
    raw = value.get("id")
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        return None
    return str(raw)
