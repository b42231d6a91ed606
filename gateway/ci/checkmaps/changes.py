"""How a published check map differs from the map in force, by meaning.

CI may change which check speaks for which entry; only the owner changes
who may speak.  A new version is therefore compared with the map in force:

- `binds_the_same(old, new)`: whether both let exactly the same runs vote
  the same way.  Each binding is read as its `meaning` (the provider's
  terms) and the two maps as sets of them, so the order of bindings and of
  refs, comments, quoting, names for people, and a GitLab ref written
  `main` or `refs/heads/main` make no difference.  Only then may a
  publication take effect without the owner.
- `binding_rows(old, new)`: the bindings side by side for the owner,
  matched by the repository (or source) they let speak, each with its
  fields and whether they changed.
- `check_rows(old, new)`: the checks whose entries or workflows differ.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from gateway.ci.checkmaps.model import CheckMap, CheckRule
from gateway.ci.providers.base import Binding

# What every binding has, shown in its own rows; the provider's other fields
# (ids, subject, source, secrets' names) are shown together as "Bound by".
COMMON = ("project", "file", "line", "issuer", "refs", "workflows", "allow_events", "shared_with")


def binds_the_same(old: CheckMap | None, new: CheckMap) -> bool:
    if old is None:
        return False
    return {b.meaning() for b in old.bindings} == {b.meaning() for b in new.bindings}


@dataclass(frozen=True)
class Field:
    label: str
    old: str | None  # None: the binding is not on that side
    new: str | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True)
class BindingRow:
    who: str  # the repository (or source) the binding lets speak
    old: Binding | None
    new: Binding | None
    fields: tuple[Field, ...]

    @property
    def change(self) -> str:
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return "changed" if self.old.meaning() != self.new.meaning() else "same"


def who(binding: Binding) -> str:
    return binding.repository_key() or f"{binding.NAME} {binding.detail() or ''}".strip()


def described(binding: Binding) -> dict[str, str]:
    """A binding as the owner reads it before approving: who, on which refs and events."""
    own = [f"{spec.name} {getattr(binding, spec.name)}" for spec in fields(binding)
           if spec.name not in COMMON and spec.name not in binding.LABELS and getattr(binding, spec.name) not in (None, False)]
    events = binding.EVENTS + (f"; also {', '.join(binding.allow_events)} (allow_events)" if binding.allow_events else "")
    return {
        "Provider": f"{binding.NAME}" + (f" · {binding.detail()}" if binding.detail() else ""),
        "Issuer": binding.issuer or "none (a shared secret)",
        "Bound by": ", ".join(own),
        "Refs that vote": ", ".join(binding.refs) if binding.refs is not None else "any (none listed)",
        "Events that vote": events,
        "Workflows": ", ".join(binding.workflows) if binding.workflows is not None else "any",
        "Shared with": ", ".join(binding.shared_with) or "no other project",
    }


def binding_rows(old: CheckMap | None, new: CheckMap) -> list[BindingRow]:
    """Every binding of either map, paired by whom it lets speak, in the new map's order."""
    before = list(old.bindings) if old is not None else []
    rows: list[BindingRow] = []
    for binding in new.bindings:
        match = next((b for b in before if who(b) == who(binding)), None)
        if match is not None:
            before.remove(match)
        rows.append(_row(match, binding))
    rows.extend(_row(b, None) for b in before)
    return rows


def _row(old: Binding | None, new: Binding | None) -> BindingRow:
    left, right = (described(b) if b is not None else {} for b in (old, new))
    labels = list(dict.fromkeys([*left, *right]))
    shown = old or new
    assert shown is not None
    return BindingRow(who(shown), old, new, tuple(Field(label, left.get(label), right.get(label)) for label in labels))


@dataclass(frozen=True)
class CheckRow:
    name: str
    old: CheckRule | None
    new: CheckRule | None


def check_rows(old: CheckMap | None, new: CheckMap) -> list[CheckRow]:
    """The checks added, removed, or whose entries or workflows changed."""
    before = old.checks if old is not None else {}
    names = sorted(set(before) | set(new.checks))
    return [CheckRow(name, before.get(name), new.checks.get(name)) for name in names
            if _rule(before.get(name)) != _rule(new.checks.get(name))]


def _rule(rule: CheckRule | None) -> tuple[frozenset[str], frozenset[str] | None] | None:
    if rule is None:
        return None
    return frozenset(rule.supports), frozenset(rule.workflows) if rule.workflows is not None else None
