"""RELAYROOM.md: the project's base playbook, then its best trusted knowledge.

Rules (docs/dashboard.md):

- The document starts with the base playbook, as the owner wrote it.
- Once the project has at least `playbook_min_trusted` trusted, unexpired
  entries, a `## Project knowledge` section follows with the top
  `playbook_top_n` of them: most used first, ties broken oldest first, so
  the order is stable between polls.  "Used" counts the principals that
  reported the entry used, once per principal per UTC day
  (`Queries.most_used_trusted`): a read token repeating `recall_used` buys
  one use a day, so reordering the document takes as many principals as
  places gained.  (The Learning panel counts every reported (recall, entry)
  pair instead: it measures recall, not rank.)
- They are grouped by kind under `### Conventions`, `### Pitfalls`,
  `### Decisions`, `### Facts`; the group holding the most used entry comes
  first (ties in that fixed order), and inside a group the most used first.
- Never a candidate, contradicted, retired or expired entry.
- A statement is written on one line (its white space collapsed), so an
  entry cannot add headings or structure of its own to the document.

`render` is pure; `relayroom_md` reads what it needs from the store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gateway.core.visible import marked
from gateway.knowledge.model import Entry, Project
from gateway.store.base import Driver
from gateway.store.queries import Queries

KIND_HEADINGS = {"convention": "Conventions", "pitfall": "Pitfalls", "decision": "Decisions", "fact": "Facts"}
KIND_ORDER = tuple(KIND_HEADINGS)
SECTION_HEADING = "## Project knowledge"


@dataclass(frozen=True)
class PlaybookEntry:
    id: str
    kind: str
    statement: str
    uses: int


def render(base: str, trusted_count: int, top: list[PlaybookEntry], min_trusted: int) -> str:
    """The document.  `top` is already the top N, most used first."""
    text = base
    if trusted_count < min_trusted or not top:
        return text
    if text and not text.endswith("\n"):
        text += "\n"
    if text:
        text += "\n"
    lines = [
        SECTION_HEADING,
        "",
        "Trusted entries of this project (confirmed by CI or an owner), most used first.",
        "Call `recall` for anything else (its first score is a confidence that the first entry answers: "
        "under 0.5, maybe nothing relevant); report a wrong entry with `report_error` and its id.",
    ]
    for kind, group in _grouped(top):
        lines += ["", f"### {KIND_HEADINGS.get(kind, kind.title())}", ""]
        lines += [f"- {_one_line(e.statement)} (`{e.id}`)" for e in group]
    return text + "\n".join(lines) + "\n"


def _grouped(top: list[PlaybookEntry]) -> list[tuple[str, list[PlaybookEntry]]]:
    groups: dict[str, list[PlaybookEntry]] = {}
    for entry in top:  # `top` is in use order, so each group is too
        groups.setdefault(entry.kind, []).append(entry)

    def rank(kind: str) -> tuple[int, int]:
        order = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
        return (-groups[kind][0].uses, order)

    return [(kind, groups[kind]) for kind in sorted(groups, key=rank)]


def _one_line(statement: str) -> str:
    return " ".join(statement.split())


def etag(document: str) -> str:
    return '"' + hashlib.sha256(document.encode("utf-8")).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, current: str) -> bool:
    """RFC 9110 weak comparison against an If-None-Match list."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        tag = candidate.strip()
        if tag == "*":
            return True
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == current:
            return True
    return False


async def relayroom_md(driver: Driver, project: Project, now: float) -> str:
    settings = project.settings

    async def unit(q: Queries) -> tuple[str, int, list[tuple[Entry, int]]]:
        base = await q.playbook(project.id)
        count = await q.count_trusted(project.id, now)
        top: list[tuple[Entry, int]] = []
        if count >= settings.playbook_min_trusted:
            top = await q.most_used_trusted(project.id, now, settings.playbook_top_n)
        return base, count, top

    base, count, top = await driver.read(unit)
    entries = [PlaybookEntry(id=e.id, kind=e.kind, statement=e.statement, uses=uses) for e, uses in top]
    # A base stored before invisible characters were refused is served with
    # a marker for each, as entries are (Entry holds its text marked).
    return render(marked(base), count, entries, settings.playbook_min_trusted)
