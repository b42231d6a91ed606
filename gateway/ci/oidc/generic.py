"""Any other OIDC issuer, bound by the exact `sub` of its tokens.

Such an issuer has no immutable id claim this gateway knows, so the binding
is the whole subject string, compared exactly.  When the binding lists
`refs`, the token must also carry a `ref` claim that is one of them.
"""

from __future__ import annotations

from typing import Any

from gateway.ci.checkmaps.model import Binding
from gateway.core.errors import Forbidden
from gateway.ci.oidc import workflows
from gateway.ci.oidc.claims import mismatch, not_bound, ref_listed, str_claim

NAME = "oidc"
REQUIRED = ("sub",)
PROVENANCE = ("sub", "ref", "sha", "run_id", "job_id", "workflow")


def identifies(binding: Binding, claims: dict[str, Any]) -> bool:
    return str_claim(claims, "sub") == binding.subject


def identity_mismatch(bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
    """The subjects other bindings name are other projects' business: a token
    of an unbound subject hears only that it is not bound."""
    return not_bound("sub", repr(claims.get("sub")), "subject")


def authorize(binding: Binding, claims: dict[str, Any]) -> None:
    if binding.refs is not None and not ref_listed(binding.refs, str_claim(claims, "ref")):
        raise mismatch("ref", f"one of {', '.join(binding.refs)}", claims.get("ref"), binding.where())


def workflow_of(claims: dict[str, Any]) -> workflows.WorkflowRef | None:
    return None


def home(claims: dict[str, Any]) -> str | None:
    return None


def provenance(claims: dict[str, Any]) -> dict[str, Any]:
    out = {name: claims[name] for name in PROVENANCE if isinstance(claims.get(name), (str, int))}
    if "sha" in out:
        out["commit"] = out["sha"]
    return out
