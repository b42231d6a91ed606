"""Audit rows as a person reads them: one sentence per row instead of its
JSON detail.

Plain text (the templates escape it): every string in a detail may have been
written by an agent.  A detail this module does not know is shown as
`key: value` pairs, so nothing in the ledger is hidden from the owner; the
JSON itself stays one click away in the API (`GET /v1/projects/{p}/audit`).
"""

from __future__ import annotations

from typing import Any, Callable

from gateway.web.labels import SETTING_LABELS, issuer_label

Label = Callable[[str], str]

MAX_TEXT = 300
MAX_ROW = 1000


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else _pairs(value) if isinstance(value, dict) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _pairs(detail: dict[str, Any]) -> str:
    return " · ".join(f"{key.replace('_', ' ')}: {_short(value)}" for key, value in sorted(detail.items()))


def _bulk(d: dict[str, Any]) -> str:
    return " (one of several entries moved at once)" if d.get("bulk") else ""


def _learn(d: dict[str, Any]) -> str:
    text = f"Wrote a {d.get('kind', '')} candidate (via {d.get('via', 'learn')})"
    if d.get("replaces"):
        text += f", a correction of {d['replaces']}"
    if d.get("proposal_id"):
        text += f", from proposal {d['proposal_id']}"
    return text + "."


def _support(d: dict[str, Any]) -> str:
    text = f"Check {_short(d.get('source', '?'))} succeeded"
    return text + (f" (attestation {d['attestation_id']})." if d.get("attestation_id") else ".")


def _promote(d: dict[str, Any], label: Label = issuer_label) -> str:
    names = ", ".join(label(i) for i in d.get("issuers", []) if isinstance(i, str))
    return f"Trusted: enough distinct issuers support it ({names})."


def _override(d: dict[str, Any]) -> str:
    return f"Confirmed by the owner (was {d.get('from', '?')}){_bulk(d)}."


PLUMBING_KEYS = ("contradicts", "via", "bulk")


def contradiction_reason(detail: Any) -> str:
    """What a contradiction says, for a person: its reason or message, else
    the other fields it carries, else that none was given.  (The entry id it
    names and how it arrived are shown elsewhere on the page.)"""
    if isinstance(detail, dict):
        said = detail.get("reason") or detail.get("message")
        if said:
            return _short(said)
        rest = {k: v for k, v in detail.items() if k not in PLUMBING_KEYS}
        return _short(_pairs(rest)) if rest else "no reason given"
    return _short(detail) if detail not in (None, "") else "no reason given"


def _contradict(d: dict[str, Any]) -> str:
    inner = d.get("detail")
    why = ""
    if isinstance(inner, dict):
        said = inner.get("reason") or inner.get("message")
        why = f": {_short(said)}" if said else (f": {_pairs(inner)}" if inner else "")
        if inner.get("bulk"):
            why += " (one of several entries moved at once)"
    return f"Contradicted (was {d.get('from', '?')}){why}"


def _rate_limited(d: dict[str, Any]) -> str:
    return f"Refused a demotion: over {d.get('limit_per_hour', '?')} demotions in an hour."


def _retire(d: dict[str, Any]) -> str:
    if d.get("via") == "expiry":
        new, old = d.get("expires_at"), d.get("previous_expires_at")
        now = f"now expires {_day(new)}" if new else "no longer expires"
        return f"Expiry changed: {now} (was {_day(old) if old else 'never'})."
    if d.get("replaced_by"):
        return f"Retired: its correction {d['replaced_by']} became trusted (was {d.get('from', '?')})."
    if d.get("via") == "owner":
        why = f": {_short(d['reason'])}" if d.get("reason") else ""
        return f"Retired by the owner (was {d.get('from', '?')}){why}{_bulk(d)}."
    return f"Retired: its expiry passed (was {d.get('from', '?')})."


def _day(moment: Any) -> str:
    return str(moment)[:10] if moment else ""


def _approve(d: dict[str, Any]) -> str:
    extra = ", which repeated a live entry" if d.get("duplicate") else ""
    return f"Approved proposal {d.get('proposal_id', '?')}{extra}."


def _reject(d: dict[str, Any]) -> str:
    why = f": {_short(d['reason'])}" if d.get("reason") else ""
    return f"Rejected proposal {d.get('proposal_id', '?')}{why}."


def _settings(d: dict[str, Any]) -> str:
    changed = d.get("changed")
    if changed == ["playbook"]:
        return "Edited the base playbook."
    if isinstance(changed, dict):
        parts = [f"{SETTING_LABELS.get(k, k)} to {v}" for k, v in sorted(changed.items())]
        return "Changed " + "; ".join(parts) + "."
    for key, verb in (("token_created", "Created"), ("token_revoked", "Revoked")):
        token = d.get(key)
        if isinstance(token, dict):
            return f"{verb} a {token.get('level', '?')} token for {token.get('principal', '?')}."
    return _pairs(d)


def _checkmap(d: dict[str, Any]) -> str:
    run: dict[str, Any] = d["run"] if isinstance(d.get("run"), dict) else {}
    origin = f"{_short(run.get('repository') or '?')}@{str(run.get('commit') or '?')[:12]}"
    what = f"the check map {_short(d.get('source', '?'))} from {origin}"
    status = d.get("status")
    if status == "applied":
        return f"Put {what} in force: only its checks changed."
    if status == "pending_owner":
        return f"Published {what}; it changes who may vote, so it waits for the owner."
    if status == "approved":
        return f"Approved {what}: it is in force."
    if status == "rejected":
        why = f": {_short(d['reason'])}" if d.get("reason") else ""
        return f"Rejected {what}{why}."
    if status == "unchanged":
        return f"Published the map in force again from {origin}; the pending map {str(d.get('withdrawn', '?'))[:12]} no longer waits."
    return _pairs(d)


DESCRIBE: dict[str, Callable[[dict[str, Any]], str]] = {
    "learn": _learn,
    "support": _support,
    "promote": _promote,
    "override": _override,
    "contradict": _contradict,
    "rate_limited": _rate_limited,
    "retire": _retire,
    "approve_proposal": _approve,
    "reject_proposal": _reject,
    "settings": _settings,
    "checkmap": _checkmap,
}


def describe(action: str, detail: Any, label: Label | None = None) -> str:
    """One sentence for an audit row; never raises, whatever the detail holds.
    `label` names an issuer identity as the page does (the check map's names
    for its bindings); without it, as the identity alone says."""
    if detail is None:
        return ""
    if not isinstance(detail, dict):
        return _short(detail)
    try:
        if action == "promote":
            text = _promote(detail, label or issuer_label)
        else:
            text = DESCRIBE[action](detail) if action in DESCRIBE else _pairs(detail)
    except (TypeError, ValueError, AttributeError):
        text = _pairs(detail)
    # One line, bounded: keys and values are anyone's text, line breaks included.
    text = " ".join(text.split())
    return text if len(text) <= MAX_ROW else text[: MAX_ROW - 1] + "…"
