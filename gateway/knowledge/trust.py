"""The trust rule as plain functions over plain data: whatever a machine
writes enters unconfirmed, and only an owner or K distinct CI issuers move
it across, never past a live contradiction.

No I/O and no clock of its own: every function takes `now`.  The store reads
the facts, asks these functions what the rule says, and writes the answer in
the same transaction.  Each function answers one row of the state table:

    (new)                 -> candidate      every writer, every path
    candidate             -> trusted        K distinct issuers, no live contradiction
    candidate             -> trusted        owner confirms, no live contradiction
    candidate, trusted    -> contradicted   an error event or an owner's refute
    candidate, trusted    -> retired        expires_at passed (read as retired at once)
    contradicted          -> trusted        owner confirms once every contradiction is past
    candidate, trusted,
      contradicted        -> retired        an owner retires it now (or sets an expiry that passes)
    replaced entry        -> retired        its correction becomes trusted, by either gate
    anything else         -> never
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Literal, get_args

from gateway.core.clock import DAY, HOUR

Kind = Literal["fact", "convention", "pitfall", "decision"]
KINDS: tuple[Kind, ...] = get_args(Kind)
STATES = ("candidate", "trusted", "contradicted", "retired")
CREATED_VIA = ("learn", "extraction", "reflection")

# Picked, not derived: no specification gives a number for the
# contradiction window.  Treat 30 days as a starting value.
DEFAULT_WINDOW_DAYS = 30.0
DEFAULT_K = 2
DEFAULT_DEMOTIONS_PER_HOUR = 10
DEFAULT_PLAYBOOK_MIN_TRUSTED = 5
DEFAULT_PLAYBOOK_TOP_N = 20


@dataclass(frozen=True)
class TrustSettings:
    k_distinct_issuers: int = DEFAULT_K
    window_days: float = DEFAULT_WINDOW_DAYS
    demotions_per_hour: int = DEFAULT_DEMOTIONS_PER_HOUR

    @property
    def window_seconds(self) -> float:
        return self.window_days * DAY


@dataclass(frozen=True)
class Contradiction:
    by: str
    at: float
    until: float  # fixed when recorded: at + the window then in force


@dataclass(frozen=True)
class EntryFacts:
    """What the rule needs to know about one entry."""

    state: str
    expires_at: float | None = None
    issuers: frozenset[str] = field(default_factory=frozenset)
    contradictions: tuple[Contradiction, ...] = ()


class Verdict(str, Enum):
    PROMOTE = "promote"
    STAY = "stay"
    BLOCKED = "blocked"
    NOT_CONFIRMABLE = "not_confirmable"
    CONTRADICT = "contradict"
    DUPLICATE = "duplicate"
    RETIRED = "retired"
    RATE_LIMITED = "rate_limited"
    RETIRE = "retire"
    ALLOWED = "allowed"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    blocked_until: float | None = None
    reason: str = ""


def is_expired(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and expires_at <= now


def effective_state(state: str, expires_at: float | None, now: float) -> str:
    """An entry reads as retired from the instant it expires; the sweep only
    writes down what is already true.  A contradicted entry keeps its state:
    retirement is for shelf life, and contradicted entries are already out of
    recall."""
    if state in ("candidate", "trusted") and is_expired(expires_at, now):
        return "retired"
    return state


def live_contradictions(contradictions: Iterable[Contradiction], now: float) -> list[Contradiction]:
    return [c for c in contradictions if c.until > now]


def blocked_until(contradictions: Iterable[Contradiction], now: float) -> float | None:
    live = live_contradictions(contradictions, now)
    return max(c.until for c in live) if live else None


def is_recallable(state: str, expires_at: float | None, now: float) -> bool:
    return effective_state(state, expires_at, now) == "trusted"


def on_support(entry: EntryFacts, settings: TrustSettings, now: float) -> Decision:
    """After a support is recorded: does the entry cross to trusted now?

    `entry.issuers` already holds the new support's issuer.  Only a candidate
    is ever promoted by support: contradicted and retired entries are never
    lifted, and a trusted entry has nothing left to gain.
    """
    state = effective_state(entry.state, entry.expires_at, now)
    if state != "candidate":
        return Decision(Verdict.STAY, reason=f"entry is {state}")
    if len(entry.issuers) < settings.k_distinct_issuers:
        return Decision(Verdict.STAY, reason="not enough distinct issuers")
    until = blocked_until(entry.contradictions, now)
    if until is not None:
        return Decision(Verdict.BLOCKED, blocked_until=until, reason="live contradiction")
    return Decision(Verdict.PROMOTE)


def on_confirm(entry: EntryFacts, now: float) -> Decision:
    """An owner confirms: alone enough, unless a contradiction is still live."""
    state = effective_state(entry.state, entry.expires_at, now)
    if state == "retired":
        return Decision(Verdict.NOT_CONFIRMABLE, reason="the entry is retired; retired is final")
    if state == "trusted":
        return Decision(Verdict.NOT_CONFIRMABLE, reason="the entry is already trusted")
    until = blocked_until(entry.contradictions, now)
    if until is not None:
        return Decision(Verdict.BLOCKED, blocked_until=until, reason="live contradiction")
    return Decision(Verdict.PROMOTE)


def on_contradict(
    entry: EntryFacts,
    principal: str,
    now: float,
    settings: TrustSettings,
    demotions_in_last_hour: int,
) -> Decision:
    """An agent's error event or an owner's refute.

    The order matters: a retired entry is final; a principal repeating itself
    inside the window adds nothing (and costs no budget); only then does the
    hourly budget apply.
    """
    state = effective_state(entry.state, entry.expires_at, now)
    if state == "retired":
        return Decision(Verdict.RETIRED, reason="the entry is retired; retired is final")
    if any(c.by == principal for c in live_contradictions(entry.contradictions, now)):
        return Decision(Verdict.DUPLICATE)
    if demotions_in_last_hour >= settings.demotions_per_hour:
        return Decision(Verdict.RATE_LIMITED, reason="demotion budget for this hour is spent")
    return Decision(Verdict.CONTRADICT)


def on_retire(entry: EntryFacts, now: float) -> Decision:
    """An owner retires an entry now.  Any live entry may be retired, a
    contradicted one too (it leaves the review queue for good); retired is
    final, so a second retire is refused rather than written twice."""
    if effective_state(entry.state, entry.expires_at, now) == "retired":
        return Decision(Verdict.RETIRED, reason="the entry is already retired; retired is final")
    return Decision(Verdict.RETIRE)


def on_owner_edit(entry: EntryFacts, now: float) -> Decision:
    """An owner changes an entry's expiry or writes a correction of it.
    Neither changes the entry's state: an expiry only says when the entry
    retires, and a correction is a new candidate that must pass the gate.
    A retired entry is final: it takes neither."""
    if effective_state(entry.state, entry.expires_at, now) == "retired":
        return Decision(Verdict.RETIRED, reason="the entry is retired; retired is final")
    return Decision(Verdict.ALLOWED)


def leaves_trust_when_replaced(replaced: EntryFacts) -> bool:
    """A correction became trusted: the entry it replaces retires, whatever
    its state (a trusted one leaves recall; a candidate or contradicted one
    is settled), unless its retirement is written down already (an expired
    one not yet swept is written down now).  The correction reached trust
    through the gate (K issuers or an owner), so this move adds no trust."""
    return replaced.state != "retired"


MAX_REPLACEMENT_CHAIN = 20


def contradiction_until(now: float, settings: TrustSettings) -> float:
    return now + settings.window_seconds


def rate_limit_retry_after(oldest_in_window: float | None, now: float) -> int:
    """Seconds until the oldest demotion of the last hour leaves the window."""
    if oldest_in_window is None:
        return 1
    return max(1, int(oldest_in_window + HOUR - now) + 1)


def normalise_statement(statement: str) -> str:
    """Case and white space do not make a new fact."""
    return " ".join(statement.casefold().split())
