"""Webhook signatures (GitHub X-Hub-Signature-256, Standard Webhooks) and the
webhook doors' answers for what is not refused outright."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from gateway.ci import webhook_signatures as sig
from gateway.core.config import Secret
from gateway.store.queries.attestations import Replay
from tests.support.attest_fixtures import checkmap, counts, github_binding, learn, write_map
from tests.support.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.support.oidc_issuer import OidcIssuer

KEY = b"0123456789abcdef0123456789abcdef"
NOW = 1_800_000_000


def test_github_signatures() -> None:
    body = b'{"zen": "Keep it logically awesome."}'
    good = sig.github_sign("s3cret", body)
    assert sig.github_valid("s3cret", body, good)
    assert sig.github_valid("s3cret", body, good.upper().replace("SHA256=", "sha256="))
    for header in (None, "", "sha256=", good[:-1], "sha1=" + "0" * 40, good + "0", "sha256=" + "g" * 64, "\x00\xff"):
        assert not sig.github_valid("s3cret", body, header)
    assert not sig.github_valid("other", body, good)
    assert not sig.github_valid("s3cret", body + b" ", good)
    assert not sig.github_valid("", body, good)


def test_standard_webhook_keys() -> None:
    assert sig.standard_key("whsec_" + base64.b64encode(KEY).decode()) == KEY
    for bad in ("", KEY.decode(), "whsec_", "whsec_!!!", "whsec_" + base64.b64encode(b"short").decode(), None):
        assert sig.standard_key(bad) is None  # type: ignore[arg-type]


def verdict(headers: dict[str, str | None], body: bytes = b"{}", keys: list[bytes] | None = None, now: float = NOW) -> Any:
    return sig.standard_verify(keys or [KEY], headers.get("id"), headers.get("ts"), headers.get("sig"), body, now)


def test_standard_webhook_signatures() -> None:
    good = sig.standard_sign(KEY, "msg_1", NOW, b"{}")
    assert verdict({"id": "msg_1", "ts": str(NOW), "sig": good}) == (sig.Verdict.VALID, 0)
    rotated = f"v1,{base64.b64encode(b'x' * 32).decode()} {good}"
    assert verdict({"id": "msg_1", "ts": str(NOW), "sig": rotated}) == (sig.Verdict.VALID, 0)
    assert verdict({"id": "msg_1", "ts": str(NOW), "sig": good}, keys=[b"o" * 32, KEY]) == (sig.Verdict.VALID, 1)
    assert verdict({"id": "msg_1", "ts": str(NOW - 300), "sig": sig.standard_sign(KEY, "msg_1", NOW - 300, b"{}")})[0] \
        is sig.Verdict.VALID
    for ts in (NOW - 301, NOW + 301):
        assert verdict({"id": "msg_1", "ts": str(ts), "sig": sig.standard_sign(KEY, "msg_1", ts, b"{}")})[0] \
            is sig.Verdict.STALE
    for headers in ({"ts": str(NOW), "sig": good}, {"id": "msg_1", "sig": good}, {"id": "msg_1", "ts": str(NOW)},
                    {"id": "msg_1", "ts": "nan", "sig": good}, {"id": "msg_1", "ts": "1e30", "sig": good},
                    {"id": "msg_1", "ts": "-1", "sig": good}, {"id": "msg 1", "ts": str(NOW), "sig": good},
                    {"id": "msg_1", "ts": str(NOW), "sig": "garbage"}, {"id": "msg_1", "ts": str(NOW), "sig": "v1,a,b"},
                    {"id": "msg_1", "ts": str(NOW), "sig": "v1,!!"}, {"id": "msg_1", "ts": str(NOW), "sig": "v1a," + good[3:]}):
        assert verdict(headers)[0] is sig.Verdict.MALFORMED, headers
    assert verdict({"id": "msg_2", "ts": str(NOW), "sig": good})[0] is sig.Verdict.INVALID
    assert verdict({"id": "msg_1", "ts": str(NOW), "sig": good}, body=b"{} ")[0] is sig.Verdict.INVALID


# -- GitHub deliveries ------------------------------------------------------------------------


def payload(**run: Any) -> dict[str, Any]:
    workflow_run = {"id": 9, "run_attempt": 1, "name": "migrations", "conclusion": "success", "event": "push",
                    "head_branch": "main", "head_sha": "abc", "path": ".github/workflows/ci.yml",
                    "head_repository": {"id": 123456}}
    workflow_run.update(run)
    return {"action": "completed", "workflow_run": workflow_run,
            "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890}}}


async def deliver(client: Any, body: dict[str, Any], secret: str, event: str = "workflow_run", *,
                  host: str | None = None) -> Any:
    """`host`: the GitHub Enterprise Server host the delivery says it comes
    from (the test issuer's host[:port] for its bindings); None: github.com."""
    raw = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": "x",
               "X-Hub-Signature-256": sig.github_sign(secret, raw)}
    if host is not None:
        headers["X-GitHub-Enterprise-Host"] = host
    return await client.post("/v1/webhooks/github", content=raw, headers=headers)


async def test_github_webhooks_answer_404_when_no_secret_is_configured(client: Any, acme: Any) -> None:
    response = await deliver(client, {"zen": "hi"}, "anything", event="ping")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


async def test_ping_and_check_run_with_the_hub_wide_secret(client: Any, hub: Any, acme: Any, checkmap_dir: Any,
                                                           issuer: OidcIssuer) -> None:
    hub.config = replace(hub.config, github_webhook_secret=Secret("hub-wide-secret"))
    hub.intake.config = hub.config  # the intake was built with the config it reads
    entry = await learn(hub, "acme", "Migrations run in staging first.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", github_binding(issuer.url, extra="    github_app: true"), {"migrations": [entry]}))
    ping = await deliver(client, {"zen": "Design for failure.", "hook_id": 1}, "hub-wide-secret", event="ping",
                         host=issuer.host)
    assert ping.status_code == 200 and ping.json() == {"event": "ping", "recorded": False}
    check_run = await deliver(client, {"action": "completed", "check_run": {"name": "migrations", "conclusion": "success"},
                                       "repository": {"id": 123456}}, "hub-wide-secret", event="check_run",
                              host=issuer.host)
    assert check_run.status_code == 200 and check_run.json()["recorded"] is False
    assert (await counts(hub))["attestations"] == 0
    # A binding with github_app: true takes workflow_run deliveries signed with the hub-wide secret.
    run = await deliver(client, payload(conclusion="failure"), "hub-wide-secret", host=issuer.host)
    assert run.status_code == 201
    [recorded] = run.json()["attestations"]
    assert recorded["counted"] is False and recorded["reason"] == "not_success"
    in_progress = await deliver(client, {**payload(id=10), "action": "in_progress"}, "hub-wide-secret",
                                host=issuer.host)
    assert in_progress.json()["reason"] == "action_not_completed"
    unbound = await deliver(client, {**payload(id=11), "repository": {"id": 42, "full_name": "x/y"}}, "hub-wide-secret",
                            host=issuer.host)
    assert unbound.status_code == 200 and unbound.json()["reason"] == "repository_not_bound"
    assert (await counts(hub))["attestations"] == 1


async def test_a_bindings_own_secret_is_required_when_it_names_one(client: Any, hub: Any, acme: Any, checkmap_dir: Any,
                                                                   issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.config = replace(hub.config, github_webhook_secret=Secret("hub-wide-secret"))
    hub.intake.config = hub.config  # the intake was built with the config it reads
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", github_binding(issuer.url, extra="    webhook_secret_env: ACME_GH_SECRET"), {}))
    # The binding's variable is not set: the hub-wide secret never stands in for it (signed, so
    # answered 200, and nothing recorded).
    unset = await deliver(client, payload(), "hub-wide-secret", host=issuer.host)
    assert unset.status_code == 200 and unset.json()["reason"] == "not_signed_with_the_bindings_secret"
    monkeypatch.setenv("ACME_GH_SECRET", "per-binding-secret")
    hub_signed = await deliver(client, payload(), "hub-wide-secret", host=issuer.host)
    assert hub_signed.status_code == 200 and hub_signed.json()["recorded"] is False
    assert (await counts(hub))["attestations"] == 0
    # A secret this gateway does not hold is a bad signature.
    assert (await deliver(client, payload(), "a-secret-nobody-configured", host=issuer.host)).status_code == 401
    assert (await deliver(client, payload(), "per-binding-secret", host=issuer.host)).status_code == 201


async def test_a_rerun_attempt_is_a_new_delivery_but_the_same_support(client: Any, hub: Any, acme: Any,
                                                                      checkmap_dir: Any, issuer: OidcIssuer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_GH_SECRET", "per-binding-secret")
    entry = await learn(hub, "acme", "Migrations run in staging first.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", github_binding(issuer.url, extra="    webhook_secret_env: ACME_GH_SECRET"), {"migrations": [entry]}))
    first = await deliver(client, payload(), "per-binding-secret", host=issuer.host)
    second = await deliver(client, payload(run_attempt=2), "per-binding-secret", host=issuer.host)
    again = await deliver(client, payload(run_attempt=2), "per-binding-secret", host=issuer.host)
    assert first.json()["attestations"][0]["supports"] == [{"entry_id": entry, "duplicate": False}]
    assert second.json()["attestations"][0]["supports"] == [{"entry_id": entry, "duplicate": True}]
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert (await counts(hub))["attestations"] == 2


async def test_webhooks_accept_bodies_up_to_1_mib_and_refuse_more(client: Any, hub: Any, acme: Any, checkmap_dir: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY", "whsec_" + base64.b64encode(KEY).decode())
    await write_map(hub, checkmap_dir, "acme.yaml",
                    "project: acme\nissuers:\n  - provider: webhook\n    source: canary\n    secret_env: CANARY\n")
    now = int(hub.clock.now())
    big = json.dumps({"check": "nightly", "outcome": "success", "logs": "x" * 900_000}).encode()
    headers = {"Content-Type": "application/json", "webhook-id": "m1", "webhook-timestamp": str(now),
               "webhook-signature": sig.standard_sign(KEY, "m1", now, big)}
    accepted = await client.post("/v1/webhooks/canary", content=big, headers=headers)
    assert accepted.status_code == 201 and accepted.json()["reason"] == "unmapped_check"
    too_big = big + b" " * (200 * 1024)
    headers.update({"webhook-id": "m2", "webhook-signature": sig.standard_sign(KEY, "m2", now, too_big)})
    refused = await client.post("/v1/webhooks/canary", content=too_big, headers=headers)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "body_too_large"
    bad_body = json.dumps({"check": "", "outcome": "success"}).encode()
    headers.update({"webhook-id": "m3", "webhook-signature": sig.standard_sign(KEY, "m3", now, bad_body)})
    invalid = await client.post("/v1/webhooks/canary", content=bad_body, headers=headers)
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_check"


async def test_sweep_forgets_only_what_can_no_longer_be_replayed(hub: Any) -> None:
    now = hub.clock.now()

    async def seed(q: Any) -> None:
        assert await q.reserve(Replay(True, "https://ci.example", "old", now - 1), now - 100)
        assert await q.reserve(Replay(True, "https://ci.example", "live", now + 600), now)
        assert await q.reserve(Replay(False, "webhook:canary:acme", "webhook-id:old"), now - 3600)
        assert await q.reserve(Replay(False, "webhook:canary:acme", "webhook-id:new"), now)
        assert await q.reserve(Replay(False, "oidc:gh:acme", "run:1:1"), now - 10 * 86400)

    await hub.driver.write(seed)
    await hub.sweep()
    rows = await hub.driver.read(lambda q: q.tx.all("SELECT jti FROM seen_tokens ORDER BY jti"))
    assert [r["jti"] for r in rows] == ["live"]
    keys = await hub.driver.read(lambda q: q.tx.all("SELECT delivery_key FROM webhook_deliveries ORDER BY delivery_key"))
    assert [r["delivery_key"] for r in keys] == ["run:1:1", "webhook-id:new"]
