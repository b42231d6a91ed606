"""The trust rule (gateway/knowledge/trust.py) as a table of cases and as
properties, over the pure functions alone (no store, no clock of its own)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.knowledge import trust
from gateway.knowledge.trust import Contradiction, EntryFacts, TrustSettings, Verdict

NOW = 1_800_000_000.0
DAY = 86400.0
K2 = TrustSettings(k_distinct_issuers=2, window_days=30, demotions_per_hour=10)


def live(by: str = "agent-1", age_days: float = 1.0, window: float = 30.0) -> Contradiction:
    at = NOW - age_days * DAY
    return Contradiction(by=by, at=at, until=at + window * DAY)


def stale(by: str = "agent-1") -> Contradiction:
    return live(by, age_days=31)


SUPPORT_CASES = [
    # (description, facts, expected verdict)
    ("one issuer of two", EntryFacts("candidate", issuers=frozenset({"oidc:a:p"})), Verdict.STAY),
    ("two distinct issuers", EntryFacts("candidate", issuers=frozenset({"oidc:a:p", "oidc:b:p"})), Verdict.PROMOTE),
    ("three issuers", EntryFacts("candidate", issuers=frozenset({"a", "b", "c"})), Verdict.PROMOTE),
    ("no issuers", EntryFacts("candidate"), Verdict.STAY),
    ("live contradiction blocks", EntryFacts("candidate", issuers=frozenset({"a", "b"}), contradictions=(live(),)), Verdict.BLOCKED),
    ("stale contradiction does not block", EntryFacts("candidate", issuers=frozenset({"a", "b"}), contradictions=(stale(),)), Verdict.PROMOTE),
    ("contradicted never lifted by support", EntryFacts("contradicted", issuers=frozenset({"a", "b"}), contradictions=(stale(),)), Verdict.STAY),
    ("retired never lifted", EntryFacts("retired", issuers=frozenset({"a", "b"})), Verdict.STAY),
    ("expired candidate reads retired", EntryFacts("candidate", expires_at=NOW - 1, issuers=frozenset({"a", "b"})), Verdict.STAY),
    ("expiry exactly now is expired", EntryFacts("candidate", expires_at=NOW, issuers=frozenset({"a", "b"})), Verdict.STAY),
    ("expiry in the future", EntryFacts("candidate", expires_at=NOW + 1, issuers=frozenset({"a", "b"})), Verdict.PROMOTE),
    ("trusted stays trusted", EntryFacts("trusted", issuers=frozenset({"a", "b", "c"})), Verdict.STAY),
]


@pytest.mark.parametrize("description,facts,expected", SUPPORT_CASES, ids=[c[0] for c in SUPPORT_CASES])
def test_support_table(description: str, facts: EntryFacts, expected: Verdict) -> None:
    assert trust.on_support(facts, K2, NOW).verdict is expected


def test_k_one_promotes_on_one_issuer() -> None:
    facts = EntryFacts("candidate", issuers=frozenset({"a"}))
    assert trust.on_support(facts, TrustSettings(k_distinct_issuers=1), NOW).verdict is Verdict.PROMOTE


def test_blocked_support_reports_until() -> None:
    c = live(age_days=10)
    decision = trust.on_support(EntryFacts("candidate", issuers=frozenset({"a", "b"}), contradictions=(c,)), K2, NOW)
    assert decision.blocked_until == c.until


CONFIRM_CASES = [
    ("candidate", EntryFacts("candidate"), Verdict.PROMOTE),
    ("candidate with live contradiction", EntryFacts("candidate", contradictions=(live(),)), Verdict.BLOCKED),
    ("contradicted inside window", EntryFacts("contradicted", contradictions=(live(),)), Verdict.BLOCKED),
    ("contradicted after window", EntryFacts("contradicted", contradictions=(stale(),)), Verdict.PROMOTE),
    ("contradicted, one stale one live", EntryFacts("contradicted", contradictions=(stale("x"), live("y"))), Verdict.BLOCKED),
    ("already trusted", EntryFacts("trusted"), Verdict.NOT_CONFIRMABLE),
    ("retired", EntryFacts("retired"), Verdict.NOT_CONFIRMABLE),
    ("expired candidate", EntryFacts("candidate", expires_at=NOW - 5), Verdict.NOT_CONFIRMABLE),
]


@pytest.mark.parametrize("description,facts,expected", CONFIRM_CASES, ids=[c[0] for c in CONFIRM_CASES])
def test_confirm_table(description: str, facts: EntryFacts, expected: Verdict) -> None:
    assert trust.on_confirm(facts, NOW).verdict is expected


def test_blocked_until_is_latest_live_contradiction() -> None:
    a, b = live("a", age_days=20), live("b", age_days=2)
    decision = trust.on_confirm(EntryFacts("contradicted", contradictions=(a, b)), NOW)
    assert decision.blocked_until == b.until


CONTRADICT_CASES = [
    ("candidate", EntryFacts("candidate"), "p", 0, Verdict.CONTRADICT),
    ("trusted", EntryFacts("trusted"), "p", 0, Verdict.CONTRADICT),
    ("contradicted by another", EntryFacts("contradicted", contradictions=(live("q"),)), "p", 0, Verdict.CONTRADICT),
    ("same principal again inside window", EntryFacts("contradicted", contradictions=(live("p"),)), "p", 0, Verdict.DUPLICATE),
    ("same principal after window", EntryFacts("contradicted", contradictions=(stale("p"),)), "p", 0, Verdict.CONTRADICT),
    ("retired is final", EntryFacts("retired"), "p", 0, Verdict.RETIRED),
    ("expired trusted is retired", EntryFacts("trusted", expires_at=NOW - 1), "p", 0, Verdict.RETIRED),
    ("budget spent", EntryFacts("trusted"), "p", 10, Verdict.RATE_LIMITED),
    ("duplicate costs no budget", EntryFacts("contradicted", contradictions=(live("p"),)), "p", 10, Verdict.DUPLICATE),
    ("budget almost spent", EntryFacts("trusted"), "p", 9, Verdict.CONTRADICT),
]


@pytest.mark.parametrize(
    "description,facts,principal,used,expected", CONTRADICT_CASES, ids=[c[0] for c in CONTRADICT_CASES]
)
def test_contradict_table(description: str, facts: EntryFacts, principal: str, used: int, expected: Verdict) -> None:
    assert trust.on_contradict(facts, principal, NOW, K2, used).verdict is expected


def test_effective_state() -> None:
    assert trust.effective_state("trusted", None, NOW) == "trusted"
    assert trust.effective_state("trusted", NOW, NOW) == "retired"
    assert trust.effective_state("candidate", NOW - 1, NOW) == "retired"
    assert trust.effective_state("contradicted", NOW - 1, NOW) == "contradicted"
    assert not trust.is_recallable("trusted", NOW - 0.001, NOW)
    assert trust.is_recallable("trusted", NOW + 0.001, NOW)


def test_normalise_statement() -> None:
    assert trust.normalise_statement("  The  Pooler\tcannot\n do X. ") == "the pooler cannot do x."


def test_default_window_is_thirty_days_and_k_two() -> None:
    assert trust.DEFAULT_WINDOW_DAYS == 30.0
    assert trust.DEFAULT_K == 2


issuer_names = st.sampled_from(["oidc:gh:p", "oidc:gl:p", "webhook:c:p", "oidc:ghe:p"])


@settings(max_examples=300, deadline=None)
@given(
    issuers=st.frozensets(issuer_names),
    k=st.integers(min_value=1, max_value=4),
    ages=st.lists(st.floats(min_value=0, max_value=60), max_size=3),
    state=st.sampled_from(trust.STATES),
)
def test_support_promotes_only_candidates_with_k_and_no_live_contradiction(
    issuers: frozenset[str], k: int, ages: list[float], state: str
) -> None:
    contradictions = tuple(live(f"p{i}", age_days=a) for i, a in enumerate(ages))
    facts = EntryFacts(state, issuers=issuers, contradictions=contradictions)
    decision = trust.on_support(facts, TrustSettings(k_distinct_issuers=k), NOW)
    promoted = decision.verdict is Verdict.PROMOTE
    expected = state == "candidate" and len(issuers) >= k and all(a >= 30 for a in ages)  # a contradiction ends at its until: the window is [at, until)
    assert promoted == expected


@settings(max_examples=300, deadline=None)
@given(ages=st.lists(st.floats(min_value=0, max_value=60), max_size=4), state=st.sampled_from(trust.STATES))
def test_confirm_never_passes_a_live_contradiction(ages: list[float], state: str) -> None:
    contradictions = tuple(live(f"p{i}", age_days=a) for i, a in enumerate(ages))
    decision = trust.on_confirm(EntryFacts(state, contradictions=contradictions), NOW)
    if any(a < 30 for a in ages):
        assert decision.verdict is not Verdict.PROMOTE
    if decision.verdict is Verdict.PROMOTE:
        assert state in ("candidate", "contradicted")


def test_an_entrys_json_follows_every_change_it_can_undergo() -> None:
    """`Entry.to_json` keeps what it built with the fields that can change;
    each change (state, expiry, promotion, a support, a contradiction) and
    the passing of time show in the next answer, and callers get a dict of
    their own."""
    from gateway.knowledge.model import ContradictionRecord, Entry, Support

    entry = Entry(seq=1, id="kn_1", project_id=1, project_slug="acme", kind="fact", statement="S.", evidence=None,
                  state="candidate", created_at=NOW, created_by="agent-7", created_via="learn", expires_at=None,
                  promoted_at=None, promoted_by=None)
    first = entry.to_json(NOW)
    assert first["state"] == "candidate" and first["supports"] == [] and list(first)[5] == "state"
    first["score"] = 1.0
    assert "score" not in entry.to_json(NOW)
    entry.supports.append(Support(issuer="oidc:ci:acme", source="c", attestation_id="at_1", at=NOW))
    assert [s["issuer"] for s in entry.to_json(NOW)["supports"]] == ["oidc:ci:acme"]
    assert entry.to_json(NOW)["distinct_issuers"] == 1
    entry.state, entry.promoted_at, entry.promoted_by = "trusted", NOW, "owner:olivia"
    promoted = entry.to_json(NOW)
    assert (promoted["state"], promoted["promoted_by"], promoted["vouched_by"]) == (
        "trusted", "owner:olivia", ["oidc:ci:acme", "owner:olivia"])
    entry.expires_at = NOW + DAY
    assert entry.to_json(NOW)["expires_at"] is not None and entry.to_json(NOW + 2 * DAY)["state"] == "retired"
    entry.contradictions.append(ContradictionRecord(by="agent-9", detail={"why": "x"}, at=NOW, until=NOW + DAY))
    entry.state = "contradicted"
    assert entry.to_json(NOW)["state"] == "contradicted" and len(entry.to_json(NOW)["contradictions"]) == 1
