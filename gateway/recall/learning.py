"""Recall quality, measured: the figures behind the Learning panel.

Every recall is recorded with the entries it returned, and `recall_used`
records which of them shaped an agent's work.  Over a window of days:

- recalls: how many recalls were made;
- returned: how many entries they returned in all (an entry returned by two
  recalls counts twice);
- used: how many of those returned entries were reported used;
- use rate: used / returned (None when nothing was returned);
- per day (UTC), the same figures, days without recalls included as zeros;
- per entry: times returned and times used; the most useful entries (most
  uses) and the least useful (returned at least `LEAST_USEFUL_MIN_RETURNED`
  times, lowest use rate first);
- trusted entries no recall has ever returned: candidates for retirement.

Uses are counted against the recall they answer (its time, its window), so a
day's use rate compares like with like.  Every figure here counts reported
(recall, entry) pairs, each once, whoever reported them: it measures how
recall answers.  RELAYROOM.md's "most used" (gateway.knowledge.playbook) ranks by a
different count on purpose, principals per entry per day, so that repeating
oneself buys no rank; the two need not agree.  The store does the counting
(`Queries.recall_days`, `use_days`, `entry_recall_counts`, `never_recalled`);
`shape` is pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core.clock import DAY, to_date, to_rfc3339
from gateway.core.errors import Invalid
from gateway.knowledge.model import Entry, Project
from gateway.store.base import Driver
from gateway.store.queries import Queries

DEFAULT_DAYS = 30
MAX_DAYS = 365
TOP = 10
PER_ENTRY_LIMIT = 100
NEVER_RECALLED_LIMIT = 20
LEAST_USEFUL_MIN_RETURNED = 3


def rate(used: int, returned: int) -> float | None:
    return round(used / returned, 4) if returned else None


@dataclass(frozen=True)
class DayFigures:
    date: str
    recalls: int
    returned: int
    used: int
    recalls_with_use: int

    @property
    def use_rate(self) -> float | None:
        return rate(self.used, self.returned)

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "recalls": self.recalls,
            "returned": self.returned,
            "used": self.used,
            "recalls_with_use": self.recalls_with_use,
            "use_rate": self.use_rate,
        }


@dataclass(frozen=True)
class EntryFigures:
    entry: Entry
    returned: int
    used: int

    @property
    def use_rate(self) -> float | None:
        return rate(self.used, self.returned)

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "entry_id": self.entry.id,
            "kind": self.entry.kind,
            "statement": self.entry.statement,
            "state": self.entry.effective_state(now),
            "returned": self.returned,
            "used": self.used,
            "use_rate": self.use_rate,
        }


@dataclass
class LearningReport:
    days: int
    since: float
    until: float
    per_day: list[DayFigures]
    entries: list[EntryFigures] = field(default_factory=list)
    most_useful: list[EntryFigures] = field(default_factory=list)
    least_useful: list[EntryFigures] = field(default_factory=list)
    never_recalled_count: int = 0
    never_recalled: list[Entry] = field(default_factory=list)

    @property
    def recalls(self) -> int:
        return sum(d.recalls for d in self.per_day)

    @property
    def returned(self) -> int:
        return sum(d.returned for d in self.per_day)

    @property
    def used(self) -> int:
        return sum(d.used for d in self.per_day)

    @property
    def recalls_with_use(self) -> int:
        return sum(d.recalls_with_use for d in self.per_day)

    @property
    def use_rate(self) -> float | None:
        return rate(self.used, self.returned)

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "days": self.days,
            "from": to_rfc3339(self.since),
            "to": to_rfc3339(self.until),
            "recalls": self.recalls,
            "entries_returned": self.returned,
            "entries_used": self.used,
            "recalls_with_use": self.recalls_with_use,
            "use_rate": self.use_rate,
            "per_day": [d.to_json() for d in self.per_day],
            "entries": [e.to_json(now) for e in self.entries],
            "most_useful": [e.to_json(now) for e in self.most_useful],
            "least_useful": [e.to_json(now) for e in self.least_useful],
            "never_recalled": {
                "count": self.never_recalled_count,
                "entries": [
                    {"entry_id": e.id, "kind": e.kind, "statement": e.statement,
                     "promoted_at": to_rfc3339(e.promoted_at)}
                    for e in self.never_recalled
                ],
            },
        }


def validate_days(days: Any) -> int:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise Invalid(f"days must be an integer from 1 to {MAX_DAYS}", code="invalid_days")
    return days


def window_start(now: float, days: int) -> float:
    """Midnight UTC `days - 1` days before today: the window holds `days` whole days."""
    today = int(now // DAY)
    return (today - days + 1) * DAY


def shape_days(
    since: float, days: int, recall_rows: list[dict[str, Any]], use_rows: list[dict[str, Any]]
) -> list[DayFigures]:
    """One figure per UTC day of the window, zeros where nothing happened."""
    first = int(since // DAY)
    recalls = {int(r["day"]): r for r in recall_rows}
    uses = {int(r["day"]): r for r in use_rows}
    out = []
    for day in range(first, first + days):
        r, u = recalls.get(day, {}), uses.get(day, {})
        out.append(
            DayFigures(
                date=to_date(day * DAY),
                recalls=int(r.get("recalls", 0)),
                returned=int(r.get("returned", 0)),
                used=int(u.get("used", 0)),
                recalls_with_use=int(u.get("recalls_with_use", 0)),
            )
        )
    return out


def rank_entries(counts: dict[int, tuple[int, int]]) -> tuple[list[int], list[int], list[int]]:
    """(per-entry order, most useful, least useful) as entry seqs."""
    by_returned = sorted(counts, key=lambda s: (-counts[s][0], -counts[s][1], s))[:PER_ENTRY_LIMIT]
    most = sorted((s for s in counts if counts[s][1] > 0), key=lambda s: (-counts[s][1], -counts[s][0], s))[:TOP]
    eligible = [s for s in counts if counts[s][0] >= LEAST_USEFUL_MIN_RETURNED]
    least = sorted(eligible, key=lambda s: (counts[s][1] / counts[s][0], -counts[s][0], s))[:TOP]
    return by_returned, most, least


async def learning_report(driver: Driver, project: Project, now: float, days: int = DEFAULT_DAYS) -> LearningReport:
    days = validate_days(days)
    since = window_start(now, days)

    async def unit(q: Queries) -> LearningReport:
        recall_rows = await q.recall_days(project.id, since)
        use_rows = await q.use_days(project.id, since)
        counts = await q.entry_recall_counts(project.id, since)
        never_count, never = await q.never_recalled(project.id, now, NEVER_RECALLED_LIMIT)
        order, most, least = rank_entries(counts)
        entries = await q.entries_by_seqs(sorted(set(order) | set(most) | set(least)))

        def figures(seqs: list[int]) -> list[EntryFigures]:
            return [EntryFigures(entries[s], *counts[s]) for s in seqs if s in entries]

        return LearningReport(
            days=days,
            since=since,
            until=now,
            per_day=shape_days(since, days, recall_rows, use_rows),
            entries=figures(order),
            most_useful=figures(most),
            least_useful=figures(least),
            never_recalled_count=never_count,
            never_recalled=never,
        )

    return await driver.read(unit)
