"""Names as people say them, for the pages: settings, issuers, counts.

An issuer identity (`oidc:token.actions.githubusercontent.com:acme`) is exact
and what the ledger keeps; a person reads "GitHub Actions · acme/api".  The
label comes from the check map in force (its bindings name the provider and
the repository for people), else from the identity's host; the identity
itself stays on the page as the element's title.
"""

from __future__ import annotations

from typing import Callable, Iterable

from gateway.ci.checkmaps.model import CheckMap
from gateway.ci.checkmaps.registry import CheckmapRegistry
from gateway.ci.providers import PROVIDERS, Binding
from gateway.ci.providers.issuers import issuer_host

SETTING_LABELS = {
    "k_distinct_issuers": "Issuers needed to trust an entry (K)",
    "window_days": "Contradiction window, in days",
    "playbook_min_trusted": "Trusted entries before RELAYROOM.md lists knowledge",
    "playbook_top_n": "Entries RELAYROOM.md lists",
    "demotions_per_hour": "Demotions per principal per hour",
}


def _well_known(host: str) -> str | None:
    """The provider whose own issuer lives at `host` (GitHub's, gitlab.com)."""
    return next((cls.LABEL for cls in PROVIDERS.values()
                 for issuer in (cls.DEFAULT_ISSUER, *cls.ID_ISSUERS) if cls.LABEL and issuer and issuer_host(issuer) == host),
                None)


def issuer_label(identity: str, bindings: Iterable[Binding] = ()) -> str:
    """A person's name for an issuer identity (or an owner, `owner:<name>`)."""
    if identity.startswith("owner:"):
        return f"{identity[len('owner:'):]} (owner)"
    scheme, _, rest = identity.partition(":")
    if scheme == "webhook":
        source = rest.rsplit(":", 1)[0] if ":" in rest else rest
        return f"Webhook {source}"
    if scheme != "oidc" or ":" not in rest:
        return identity
    host = rest.rsplit(":", 1)[0]
    matching = [b for b in bindings if b.OIDC and b.identity == identity]
    provider = next((b.LABEL for b in matching if b.LABEL), None)
    # A GitHub Enterprise Server or self-hosted GitLab reads as its provider;
    # the pages keep the exact identity (host included) as the title.
    name = provider or _well_known(host) or f"CI at {host}"
    details = sorted({d for d in (b.detail() for b in matching) if d})
    return f"{name} · {', '.join(details)}" if details else name


def _map_in_force(registry: CheckmapRegistry, slug: str) -> CheckMap | None:
    return registry.snapshot.maps.get(slug)


def bindings_of(registry: CheckmapRegistry, slug: str) -> tuple[Binding, ...]:
    """The issuer bindings of the check map in force for `slug` (none without one)."""
    checkmap = _map_in_force(registry, slug)
    return checkmap.bindings if checkmap is not None else ()


def mapped_checks(registry: CheckmapRegistry, slug: str) -> dict[str, list[str]]:
    """For each entry id, the checks the check map in force says support it."""
    checkmap = _map_in_force(registry, slug)
    named: dict[str, list[str]] = {}
    for check, rule in sorted(checkmap.checks.items() if checkmap is not None else ()):
        for entry_id in rule.supports:
            named.setdefault(entry_id, []).append(check)
    return named


def labeller(registry: CheckmapRegistry, slug: str) -> Callable[[str], str]:
    bindings = bindings_of(registry, slug)
    return lambda identity: issuer_label(identity, bindings)


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """`1 entry`, `2 entries`, `0 entries`."""
    word = singular if count == 1 else (plural_form or (singular[:-1] + "ies" if singular.endswith("y") else singular + "s"))
    return f"{count} {word}"
