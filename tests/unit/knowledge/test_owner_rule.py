"""The trust rule's answers for the owner's moves beyond confirm and refute,
and what the pages make of any audit detail or issuer identity."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.ci.providers.github import GitHubActions
from gateway.ci.providers.gitlab import GitLab
from gateway.knowledge import trust
from gateway.knowledge.trust import EntryFacts, Verdict
from gateway.web.audit_text import DESCRIBE, describe
from gateway.web.labels import issuer_label, plural

NOW = 1_800_000_000.0


def facts(state: str, expires_at: float | None = None) -> EntryFacts:
    return EntryFacts(state=state, expires_at=expires_at)


def test_any_live_entry_may_be_retired_and_retired_is_final() -> None:
    for state in ("candidate", "trusted", "contradicted"):
        assert trust.on_retire(facts(state), NOW).verdict is Verdict.RETIRE
    assert trust.on_retire(facts("retired"), NOW).verdict is Verdict.RETIRED
    # an expired candidate or trusted entry already reads as retired
    assert trust.on_retire(facts("trusted", NOW - 1), NOW).verdict is Verdict.RETIRED
    # a contradicted entry keeps its state past its expiry, so it can still be retired
    assert trust.on_retire(facts("contradicted", NOW - 1), NOW).verdict is Verdict.RETIRE


def test_an_expiry_or_a_correction_never_touches_a_retired_entry() -> None:
    for state in ("candidate", "trusted", "contradicted"):
        assert trust.on_owner_edit(facts(state), NOW).verdict is Verdict.ALLOWED
    assert trust.on_owner_edit(facts("retired"), NOW).verdict is Verdict.RETIRED
    assert trust.on_owner_edit(facts("candidate", NOW), NOW).verdict is Verdict.RETIRED


def test_a_replaced_entry_leaves_trust_unless_its_retirement_is_written_down() -> None:
    for state in ("candidate", "trusted", "contradicted"):
        assert trust.leaves_trust_when_replaced(facts(state))
    assert trust.leaves_trust_when_replaced(facts("trusted", NOW - 1))  # expired, not yet swept: written down now
    assert not trust.leaves_trust_when_replaced(facts("retired"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
known_keys = st.sampled_from(
    ["from", "via", "reason", "detail", "bulk", "replaces", "replaced_by", "expires_at", "previous_expires_at",
     "issuers", "source", "attestation_id", "changed", "token_created", "token_revoked", "proposal_id", "duplicate",
     "limit_per_hour", "kind", "message"]
)


@settings(max_examples=300, deadline=None)
@given(action=st.sampled_from([*DESCRIBE, "unknown"]), detail=json_values | st.dictionaries(known_keys, json_values, max_size=6))
def test_any_audit_detail_reads_as_one_bounded_line(action: str, detail: Any) -> None:
    text = describe(action, detail)
    assert isinstance(text, str) and "\n" not in text
    assert len(text) < 2500


def test_audit_rows_read_as_sentences() -> None:
    assert describe("override", {"from": "candidate"}) == "Confirmed by the owner (was candidate)."
    assert describe("retire", {"from": "trusted"}) == "Retired: its expiry passed (was trusted)."
    assert describe("settings", {"changed": {"k_distinct_issuers": 3}}) == "Changed Issuers needed to trust an entry (K) to 3."
    assert describe("contradict", {"from": "trusted", "detail": {"contradicts": "kn_1", "reason": "wrong"}}) == \
        "Contradicted (was trusted): wrong"
    assert describe("promote", {"issuers": ["oidc:token.actions.githubusercontent.com:acme", "webhook:canary:acme"]}) == \
        "Trusted: enough distinct issuers support it (GitHub Actions, Webhook canary)."


def test_issuers_are_named_as_people_name_them() -> None:
    github = GitHubActions(project="acme", file="acme.yaml", line=3, issuer="https://token.actions.githubusercontent.com",
                           repository_name="acme/api", repository_id="1")
    local = GitHubActions(project="acme", file="acme.yaml", line=9, issuer="http://127.0.0.1:9101",
                          repository_name="acme/web", repository_id="2")
    gitlab = GitLab(project="acme", file="acme.yaml", line=14, issuer="https://gitlab.example.com",
                    project_path="acme/infra", project_id="42")
    bindings = [github, local, gitlab]
    assert issuer_label("oidc:token.actions.githubusercontent.com:acme", bindings) == "GitHub Actions · acme/api"
    assert issuer_label("oidc:127.0.0.1:9101:acme", bindings) == "GitHub Actions · acme/web"
    assert issuer_label("oidc:gitlab.example.com:acme", bindings) == "GitLab · acme/infra"
    assert issuer_label("oidc:token.actions.githubusercontent.com:acme") == "GitHub Actions"
    assert issuer_label("oidc:ci.example.com:acme") == "CI at ci.example.com"
    assert issuer_label("webhook:nightly-canary:acme") == "Webhook nightly-canary"
    assert issuer_label("owner:olivia") == "olivia (owner)"
    # a binding of another project never names this project's issuer
    assert issuer_label("oidc:127.0.0.1:9101:rival", bindings) == "CI at 127.0.0.1:9101"


def test_counts_agree_with_their_number() -> None:
    assert [plural(n, "entry") for n in (0, 1, 2)] == ["0 entries", "1 entry", "2 entries"]
    assert plural(1, "attestation") == "1 attestation" and plural(3, "time") == "3 times"


def test_a_contradiction_reads_as_its_reason_never_as_json() -> None:
    from gateway.web.audit_text import contradiction_reason

    assert contradiction_reason({"contradicts": "kn_1", "reason": "it can since 1.22"}) == "it can since 1.22"
    assert contradiction_reason({"contradicts": "kn_1"}) == "no reason given"
    assert contradiction_reason({"contradicts": "kn_1", "tool": "pytest"}) == "tool: pytest"
    assert contradiction_reason({"reason": "refuted", "via": "refute", "bulk": True}) == "refuted"
