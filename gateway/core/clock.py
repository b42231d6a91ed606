"""Time as an injectable dependency, and the one timestamp format of the API.

Inside the gateway a moment is a float of seconds since the epoch (UTC): the
same type in SQLite and PostgreSQL, cheap to compare.  Outside it is RFC 3339
UTC with a `Z`.  Tests move a `ManualClock` instead of sleeping.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from functools import lru_cache
from typing import Protocol

DAY = 86400.0
HOUR = 3600.0


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float | None = None) -> None:
        self._now = float(start if start is not None else time.time())

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def set(self, moment: float) -> None:
        self._now = float(moment)


# The moments a date can name.  A stored value outside them (a window of 1e7
# days from an old database, inf, nan) is shown as the nearest end rather
# than failing the page or the API that prints it.
_FIRST = datetime(1, 1, 1, tzinfo=timezone.utc)
_LAST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
_FIRST_S, _LAST_S = _FIRST.timestamp(), _LAST.timestamp()


def _utc(moment: float) -> datetime:
    if moment != moment:  # nan: no moment at all; as far off as "never" reads
        return _LAST
    if moment <= _FIRST_S:
        return _FIRST
    if moment >= _LAST_S:
        return _LAST
    try:
        return datetime.fromtimestamp(moment, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):  # a platform whose C library is narrower
        return _LAST if moment > 0 else _FIRST


def to_rfc3339(moment: float | None) -> str | None:
    if moment is None:
        return None
    return _rfc3339(moment)


@lru_cache(maxsize=65_536)
def _rfc3339(moment: float) -> str:
    # Kept per moment: an answer of entries writes the same few moments
    # (created, promoted, supported) on every recall of them.  isoformat (in
    # C) writes the fraction only when there is one, as the contract's
    # examples do; "+00:00" becomes "Z".
    return _utc(moment).isoformat()[:-6] + "Z"


def to_date(moment: float) -> str:
    return _utc(moment).date().isoformat()  # strftime's %Y drops the zeros of year 1


def parse_rfc3339(text: str) -> float:
    """Parse an RFC 3339 timestamp; naive times are refused, not guessed."""
    if not isinstance(text, str) or len(text) > 64:
        raise ValueError("not an RFC 3339 timestamp")
    value = text.strip()
    if value.endswith(("z", "Z")):
        value = value[:-1] + "+00:00"
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        raise ValueError("timestamp needs a time zone (use Z for UTC)")
    return dt.timestamp()
