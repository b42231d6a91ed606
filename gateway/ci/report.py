"""The Checks view: what the project's CI has attested, and what to map next.

Every check name found in the project's attestations, mapped or not, with
each issuer's counts by outcome, how many counted, and when it was last seen.
Whether a check is mapped comes from the check map in force (the hub's
check map registry); without a registry, from the
reason of the check's latest attestation.  For an unmapped check, the
candidates whose statements share words with the check's name are listed, so
a maintainer sees which entry ids to add under `checks:` in the check map.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from gateway.ci.checkmaps.model import CheckRule
from gateway.ci.checkmaps.registry import CheckmapRegistry
from gateway.knowledge.model import Entry, Project
from gateway.store.base import Driver
from gateway.store.queries import Queries

OUTCOMES = ("success", "failure", "cancelled", "skipped")
RELATED_LIMIT = 5
RELATED_SCAN = 200
# Words in check names that say nothing about what the check proves.
NOISE_WORDS = frozenset(
    "the and for with check checks job jobs run runs ci workflow workflows pipeline step steps yml yaml github".split()
)


@dataclass
class IssuerFigures:
    issuer: str
    outcomes: dict[str, int] = field(default_factory=dict)
    counted: int = 0
    last_at: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())


@dataclass
class CheckSummary:
    name: str
    issuers: list[IssuerFigures] = field(default_factory=list)
    mapped: bool = False
    supports: tuple[str, ...] = ()  # entry ids the check map names, when known
    latest_reason: str | None = None
    related: list[Entry] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(i.total for i in self.issuers)

    @property
    def last_at(self) -> float:
        return max((i.last_at for i in self.issuers), default=0.0)


@dataclass
class ChecksReport:
    checks: list[CheckSummary]
    mapped_never_seen: list[tuple[str, tuple[str, ...]]]  # check map names with no attestation yet
    checkmap_file: str | None
    registry_known: bool
    statements: dict[str, str] = field(default_factory=dict)  # each supported id that is an entry of the project


def summarise(rows: list[dict[str, Any]]) -> list[CheckSummary]:
    """Group `Queries.check_outcomes` rows by check, then issuer (pure)."""
    checks: dict[str, CheckSummary] = {}
    issuers: dict[tuple[str, str], IssuerFigures] = {}
    for row in rows:
        name, issuer = row["check_name"], row["issuer"]
        summary = checks.setdefault(name, CheckSummary(name=name))
        figures = issuers.get((name, issuer))
        if figures is None:
            figures = issuers[(name, issuer)] = IssuerFigures(issuer=issuer)
            summary.issuers.append(figures)
        count = int(row["n"])
        figures.outcomes[row["outcome"]] = figures.outcomes.get(row["outcome"], 0) + count
        if int(row["counted"]):
            figures.counted += count
        figures.last_at = max(figures.last_at, float(row["last_at"]))
    return sorted(checks.values(), key=lambda c: c.name)


def words_of(check_name: str) -> list[str]:
    """Meaningful lower-case words of a check name (`stagingMigrations-test` ->
    staging, migrations, migration, test), singular forms added."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", check_name)
    words: list[str] = []
    for word in re.split(r"[^A-Za-z0-9]+", spaced.casefold()):
        if len(word) < 3 or word in NOISE_WORDS or word.isdigit():
            continue
        for form in (word, word[:-1] if len(word) > 4 and word.endswith("s") else None):
            if form and form not in words:
                words.append(form)
    return words[:8]


def rank_related(candidates: list[Entry], words: list[str], limit: int = RELATED_LIMIT) -> list[Entry]:
    """Candidates sharing the most words with the check name, newest first on ties."""
    def score(entry: Entry) -> int:
        text = entry.statement.casefold()
        return sum(1 for w in words if w in text)

    scored = [(score(e), e.seq, e) for e in candidates]
    scored = [s for s in scored if s[0] > 0]
    scored.sort(key=lambda s: (-s[0], -s[1]))
    return [e for _, _, e in scored[:limit]]


async def checks_report(
    driver: Driver, project: Project, now: float, registry: CheckmapRegistry | None = None
) -> ChecksReport:
    checkmap = registry.snapshot.maps.get(project.slug) if registry is not None else None
    rules: dict[str, CheckRule] = dict(checkmap.checks) if checkmap is not None else {}

    async def unit(q: Queries) -> ChecksReport:
        summaries = summarise(await q.check_outcomes(project.id))
        reasons = await q.latest_check_reasons(project.id)
        for summary in summaries:
            summary.latest_reason = reasons.get(summary.name)
            if registry is not None:
                rule = rules.get(summary.name)
                summary.mapped = rule is not None
                summary.supports = rule.supports if rule is not None else ()
            else:
                summary.mapped = summary.latest_reason != "unmapped_check"
            if not summary.mapped:
                words = words_of(summary.name)
                found = await q.candidates_mentioning(project.id, now, words, RELATED_SCAN)
                summary.related = rank_related(found, words)
        seen = {s.name for s in summaries}
        never = [(name, rule.supports) for name, rule in sorted(rules.items()) if name not in seen]
        supported = sorted({i for rule in rules.values() for i in rule.supports})
        entries = await q.entries_by_ids(project.id, supported) if supported else {}
        return ChecksReport(
            checks=summaries,
            mapped_never_seen=never,
            checkmap_file=PurePath(checkmap.file).name if checkmap is not None else None,
            registry_known=registry is not None,
            statements={entry_id: entry.statement for entry_id, entry in entries.items()},
        )

    return await driver.read(unit)


async def recent_runs(driver: Driver, project: Project, per_check: int) -> dict[str, list[dict[str, Any]]]:
    """The latest `per_check` attestations of each check, newest first, by check name."""
    recent: dict[str, list[dict[str, Any]]] = {}
    for row in await driver.read(lambda q: q.recent_attestations(project.id, per_check)):
        recent.setdefault(row["check_name"], []).append(row)
    return recent
