"""A project's settings: their names, their ranges, their defaults, and the
one check every door uses (API, dashboard, CLI, import, OpenAPI), so a value
one door accepts no other refuses."""

from __future__ import annotations

import math
import re
from typing import Any

from gateway.core.errors import Invalid
from gateway.knowledge import trust
from gateway.knowledge.model import ProjectSettings

# A project's name, in paths and check maps; the pattern is the check map
# schema's too.  Always `SLUG.fullmatch`: `$` also matches before a trailing
# line break, so with `match` `acme\n` would be a second project printing
# like the first.
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
SLUG_RULE = "1 to 63 characters of a-z, 0-9 and '-', the first a letter or digit (nothing else, not even a line break)"
# Who a token names; `PRINCIPAL.fullmatch` too.
PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}")
PRINCIPAL_RULE = "1 to 128 characters of letters, digits and . _ @ : -, the first a letter or digit (nothing else, not even a line break)"

# The ranges of the settings (docs/security.md, Limits).  Every bound is finite: a window of 1e7 days put a
# contradiction's `until` in the year 29405, which no date type can print.
SETTING_RULES: dict[str, tuple[type, float, float, str]] = {
    # name: (type, minimum, maximum, what a person is told)
    "k_distinct_issuers": (int, 1, 100, "an integer from 1 to 100"),
    "window_days": (float, 0, 3650, "a number of days above 0 and at most 3650"),
    "playbook_min_trusted": (int, 0, 1_000_000, "an integer from 0 to 1000000"),
    "playbook_top_n": (int, 1, 100, "an integer from 1 to 100"),
    "demotions_per_hour": (int, 1, 1_000_000, "an integer from 1 to 1000000"),
}


def setting_ok(name: str, value: Any) -> bool:
    """Whether `value` (as JSON decoded it) is in the contract's range for `name`."""
    kind, minimum, maximum, _ = SETTING_RULES[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False  # true is not 1, "2" is not 2
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if kind is int and isinstance(value, float) and not value.is_integer():
        return False
    if name == "window_days":
        return minimum < value <= maximum
    return minimum <= value <= maximum


def default_settings() -> ProjectSettings:
    return ProjectSettings(
        k_distinct_issuers=trust.DEFAULT_K,
        window_days=trust.DEFAULT_WINDOW_DAYS,
        playbook_min_trusted=trust.DEFAULT_PLAYBOOK_MIN_TRUSTED,
        playbook_top_n=trust.DEFAULT_PLAYBOOK_TOP_N,
        demotions_per_hour=trust.DEFAULT_DEMOTIONS_PER_HOUR,
    )


def validate_settings(current: ProjectSettings, changes: dict[str, Any]) -> ProjectSettings:
    values = current.to_json()
    for name, value in changes.items():
        if name not in SETTING_RULES:
            raise Invalid(f"unknown setting {name!r}", code="unknown_field")
        kind, _, _, wanted = SETTING_RULES[name]
        if not setting_ok(name, value):
            raise Invalid(f"{name} must be {wanted}", code="invalid_setting")
        values[name] = kind(value)
    return ProjectSettings(**values)
