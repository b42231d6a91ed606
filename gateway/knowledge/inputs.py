"""What a caller may hand the knowledge services: kinds, statements, evidence,
expiry, page sizes.

Every door passes what it parsed (JSON, MCP arguments, form fields) as it
came, so each check takes `object` and returns the narrowed type: past these
functions a kind is a `Kind` and a statement a `str`.  The limits are read by
the OpenAPI document and the MCP tool schemas too, so that what a schema
advertises is what the service refuses.
"""

from __future__ import annotations

from typing import Any

from gateway.core.clock import DAY
from gateway.core.errors import Invalid
from gateway.core.visible import describe, first_invisible, first_invisible_in
from gateway.knowledge.trust import KINDS, STATES, Kind

MAX_STATEMENT = 2000
MAX_EVIDENCE = 8000
MAX_EVENT_TYPE = 100
MAX_DETAIL_DEPTH = 32  # an event's detail nested deeper is refused before anything walks it
MAX_TTL_DAYS = 36500.0
MAX_PAGE = 200


def validate_kind(kind: object, *, field: str = "kind") -> Kind:
    if kind not in KINDS:
        raise Invalid(f"{field} must be one of {', '.join(KINDS)}", code="invalid_kind")
    return kind


def validate_state(state: str | None) -> str | None:
    if state is not None and state not in STATES:
        raise Invalid(f"state must be one of {', '.join(STATES)}", code="invalid_state")
    return state


def validate_text(value: object, field: str, limit: int) -> str:
    """Text a person reviews or an agent is served: a non-blank string of at
    most `limit` characters, every one of them visible."""
    if not isinstance(value, str):
        raise Invalid(f"{field} must be a non-empty string", code="invalid_field")
    if len(value) > limit:
        raise Invalid(f"{field} is longer than {limit} characters", code="invalid_field")
    # Before the blank check: Python's strip() takes \x1c-\x1f and \x85 for
    # white space, and they are invisible characters first.
    refuse_invisible(value, field)
    if not value.strip():
        raise Invalid(f"{field} must be a non-empty string", code="invalid_field")
    return value


def refuse_invisible(value: str, field: str) -> None:
    """422 `invisible_text` when `value` holds a character a person cannot
    see (gateway.core.visible): an owner confirms only text they can read,
    and agents are served only what the owner saw."""
    found = first_invisible(value)
    if found is not None:
        raise invisible_text(field, *found)


def refuse_invisible_json(value: object, field: str) -> None:
    """As `refuse_invisible`, for every string (keys too) of a JSON value."""
    found = first_invisible_in(value, field)
    if found is not None:
        raise invisible_text(*found)


def validate_detail(detail: object) -> dict[str, Any]:
    """An event's detail: a JSON object nested at most MAX_DETAIL_DEPTH deep
    (the JSON parser takes about a thousand levels; walking or storing that
    many would exhaust the interpreter's stack)."""
    if not isinstance(detail, dict):
        raise Invalid("detail must be a JSON object", code="invalid_field")
    level: list[object] = [detail]
    for _ in range(MAX_DETAIL_DEPTH):
        level = [item for value in level if isinstance(value, (dict, list))
                 for item in (value.values() if isinstance(value, dict) else value)]
        if not level:
            return detail
    raise Invalid(f"detail is nested more than {MAX_DETAIL_DEPTH} levels deep", code="invalid_field")


def invisible_text(field: str, position: int, char: str) -> Invalid:
    return Invalid(
        f"{field} holds a character a person cannot see, {describe(position, char)}: remove it and send the "
        "text again (invisible and direction-changing characters are refused, so that what the owner reviews "
        "is what agents are served)",
        code="invisible_text",
    )


def optional_text(value: object, field: str, limit: int) -> str | None:
    """As `validate_text`, but None (absent) passes; an empty string does not."""
    return None if value is None else validate_text(value, field, limit)


def validate_expiry(ttl_days: object, expires_at: float | None, now: float) -> float | None:
    """The expiry a new entry gets: from `ttl_days` (days from now) or an
    absolute `expires_at` in the future, never both; None for no expiry."""
    if ttl_days is not None and expires_at is not None:
        raise Invalid("give ttl_days or expires_at, not both", code="invalid_field")
    if ttl_days is not None:
        # bool is an int to Python; `true` days is a client bug, not one day.
        if isinstance(ttl_days, bool) or not isinstance(ttl_days, (int, float)) or not (0 < ttl_days <= MAX_TTL_DAYS):
            raise Invalid(f"ttl_days must be a number of days above 0 and at most {MAX_TTL_DAYS:g}", code="invalid_field")
        return now + float(ttl_days) * DAY
    if expires_at is not None and expires_at <= now:
        raise Invalid("expires_at must be in the future", code="invalid_field")
    return expires_at


def validate_page_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise Invalid(f"limit must be between 1 and {MAX_PAGE}", code="invalid_limit")
    return limit
