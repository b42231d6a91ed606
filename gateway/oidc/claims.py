"""Small pure helpers the provider modules share: reading a claim as an id
or a string, and the refusals that name the claim, what the check map
expects and what the token carried (never the token itself)."""

from __future__ import annotations

from typing import Any

from gateway.errors import Forbidden, Unauthorized


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
    return Forbidden(
        f"{claim}: the check map ({where}) expects {expected}; the token carried {shown(carried)}",
        code="binding_mismatch",
        extra={"claim": claim},
    )


def ref_listed(refs: tuple[str, ...] | None, ref: str | None) -> bool:
    if refs is None or ref is None:
        return False
    return "*" in refs or ref in refs
