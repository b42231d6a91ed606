"""Plain records passed between the store, the core and the doors (REST, MCP, CLI)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core.clock import to_rfc3339
from gateway.core.visible import marked, marked_json
from gateway.knowledge.trust import Contradiction, EntryFacts, TrustSettings, effective_state

LEVELS = ("read", "write", "owner")
_LEVEL_RANK = {name: rank for rank, name in enumerate(LEVELS)}


def level_at_least(level: str, needed: str) -> bool:
    return _LEVEL_RANK.get(level, -1) >= _LEVEL_RANK[needed]


@dataclass(frozen=True)
class ProjectSettings:
    k_distinct_issuers: int
    window_days: float
    playbook_min_trusted: int
    playbook_top_n: int
    demotions_per_hour: int

    def trust(self) -> TrustSettings:
        return TrustSettings(
            k_distinct_issuers=self.k_distinct_issuers,
            window_days=self.window_days,
            demotions_per_hour=self.demotions_per_hour,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "k_distinct_issuers": self.k_distinct_issuers,
            "window_days": self.window_days,
            "playbook_min_trusted": self.playbook_min_trusted,
            "playbook_top_n": self.playbook_top_n,
            "demotions_per_hour": self.demotions_per_hour,
        }


@dataclass(frozen=True)
class Project:
    id: int
    slug: str
    settings: ProjectSettings
    created_at: float


@dataclass(frozen=True)
class Principal:
    """Who is calling: one project, one name, one level."""

    project: Project
    name: str
    level: str

    def at_least(self, needed: str) -> bool:
        return level_at_least(self.level, needed)

    @property
    def is_owner(self) -> bool:
        return self.level == "owner"


@dataclass(frozen=True)
class Support:
    issuer: str
    source: str
    attestation_id: str | None
    at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "source": self.source,
            "attestation_id": self.attestation_id,
            "at": to_rfc3339(self.at),
        }


@dataclass(frozen=True)
class ContradictionRecord:
    by: str
    detail: Any
    at: float
    until: float

    def __post_init__(self) -> None:
        # An agent's words, shown to the owner and served with the entry: as
        # an Entry's text, never with an invisible character (see Entry).
        object.__setattr__(self, "detail", marked_json(self.detail))

    def to_rule(self) -> Contradiction:
        return Contradiction(by=self.by, at=self.at, until=self.until)

    def to_json(self) -> dict[str, Any]:
        return {"by": self.by, "detail": self.detail, "at": to_rfc3339(self.at), "until": to_rfc3339(self.until)}


@dataclass
class Entry:
    seq: int
    id: str
    project_id: int
    project_slug: str
    kind: str
    statement: str
    evidence: str | None
    state: str
    created_at: float
    created_by: str
    created_via: str
    expires_at: float | None
    promoted_at: float | None
    promoted_by: str | None
    provenance: dict[str, Any] | None = None
    supports: list[Support] = field(default_factory=list)
    contradictions: list[ContradictionRecord] = field(default_factory=list)
    # to_json's answer, kept with what it was built from (see to_json).
    _json: tuple[tuple[Any, ...], dict[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)
    # The texts as the store holds them (see __post_init__).
    stored_statement: str = field(default="", init=False, repr=False, compare=False)
    stored_evidence: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Every door (REST, MCP, RELAYROOM.md, the CLI, the dashboard) reads
        # these fields, so this is the one place text stored before invisible
        # characters were refused (an old store, an import) is made visible:
        # each such character becomes its marker (`[U+E0053]`), and no door
        # can hand it out as it is.  The dashboard draws the stored text
        # with each marker highlighted.  New text was checked on the way in,
        # and comes out unchanged.
        self.stored_statement, self.stored_evidence = self.statement, self.evidence
        self.statement = marked(self.statement)
        self.evidence = None if self.evidence is None else marked(self.evidence)
        self.provenance = marked_json(self.provenance)

    @property
    def holds_invisible(self) -> bool:
        """Whether the stored text holds characters a person cannot see."""
        return self.statement != self.stored_statement or self.evidence != self.stored_evidence

    def effective_state(self, now: float) -> str:
        return effective_state(self.state, self.expires_at, now)

    def issuers(self) -> frozenset[str]:
        """The CI issuers whose supports the entry holds (the count against K)."""
        return frozenset(s.issuer for s in self.supports)

    @property
    def confirmed_by(self) -> str | None:
        """The owner whose confirm made the entry trusted, when one did."""
        by = self.promoted_by or ""
        return by[len("owner:"):] if by.startswith("owner:") else None

    def vouched_by(self) -> list[str]:
        """Everyone who vouches for the entry, as the doors show it: its CI
        issuers, sorted, then `owner:<name>` when an owner's confirm promoted
        it (an owner is a promoting issuer too, and alone enough)."""
        names = sorted(self.issuers())
        if self.confirmed_by is not None:
            names.append(f"owner:{self.confirmed_by}")
        return names

    def facts(self) -> EntryFacts:
        return EntryFacts(
            state=self.state,
            expires_at=self.expires_at,
            issuers=self.issuers(),
            contradictions=tuple(c.to_rule() for c in self.contradictions),
        )

    def visible_to(self, principal: Principal, now: float) -> bool:
        if principal.is_owner or self.created_by == principal.name:
            return True
        return self.effective_state(now) == "trusted"

    def to_json(self, now: float) -> dict[str, Any]:
        """A fresh dict each call (callers add to it).  The entry's text
        never changes; what may (its state, expiry, promotion, and its
        supports and contradictions, only ever appended) is the key the
        answer is kept with: recall returns the same entries again and
        again, and building one was most of a recall's answer."""
        key = (self.state, self.expires_at, self.promoted_at, self.promoted_by, len(self.supports), len(self.contradictions))
        kept = self._json
        if kept is None or kept[0] != key:
            kept = self._json = (key, self._payload())
        payload = dict(kept[1])
        payload["state"] = self.effective_state(now)
        return payload

    def _payload(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project_slug,
            "kind": self.kind,
            "statement": self.statement,
            "evidence": self.evidence,
            "state": self.state,  # to_json writes the effective state of the moment
            "created_at": to_rfc3339(self.created_at),
            "created_by": self.created_by,
            "created_via": self.created_via,
            "expires_at": to_rfc3339(self.expires_at),
            "promoted_at": to_rfc3339(self.promoted_at),
            "promoted_by": self.promoted_by,
            "distinct_issuers": len(self.issuers()),
            "vouched_by": self.vouched_by(),
            "supports": [s.to_json() for s in self.supports],
            "contradictions": [c.to_json() for c in self.contradictions],
            "provenance": self.provenance,
        }
