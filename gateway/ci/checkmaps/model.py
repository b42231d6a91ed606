"""What a check map says, once parsed and validated: plain frozen records.

A check map file names one project, the CI systems (issuer bindings, each
an instance of its provider's class: `gateway.ci.providers`) whose runs may
speak for it, and the checks whose success supports entries.  The records
below are what the rest of the gateway reads; the YAML never leaves
`gateway.ci.checkmaps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.ci.providers.base import Binding


@dataclass(frozen=True)
class CheckRule:
    """One `checks:` item: which entries a success supports, and optionally
    which workflows may speak for the check."""

    name: str
    supports: tuple[str, ...]
    workflows: tuple[str, ...] | None
    line: int


@dataclass(frozen=True)
class CheckMap:
    project: str
    file: str
    sha256: str
    bindings: tuple[Binding, ...]
    checks: dict[str, CheckRule] = field(default_factory=dict)
    project_line: int = 1  # where `project:` is written, for the problems that name it
    content: str = ""  # the text this map was read from, as the owner reviews it


@dataclass(frozen=True)
class Problem:
    """A validation problem, printed as `FILE:LINE: message`."""

    file: str
    line: int
    message: str
    severity: str = "error"  # "note": said to the reader, never a reason to refuse the file

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"
