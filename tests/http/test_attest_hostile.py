"""Hostile inputs at the CI doors: each is refused (the contract's status and
error body, or `counted: false` where the contract says so) and records
nothing: no attestation, no support, no jti or delivery used up, no audit row.

Each case gets a fresh hub, check map and issuers, so "no fetch" can be
asserted: a malformed token or an unbound issuer never makes the gateway
contact an issuer.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from jwt.api_jws import PyJWS

from gateway.ci import webhook_signatures as sig
from tests.support.attest_fixtures import checkmap, counts, github_binding, gitlab_binding, learn, write_map
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import make_project
from tests.support.oidc_issuer import OidcIssuer

GH_SECRET = "gh-webhook-secret-for-the-hostile-table"
CANARY_KEY = b"canary-key-0123456789abcdef"
BETA_KEY = b"beta-key-0123456789abcdefghij"


@dataclass
class Ctx:
    hub: Any
    client: httpx.AsyncClient
    gh: OidcIssuer
    gl: OidcIssuer
    attacker: OidcIssuer
    entry: str
    now: float
    extra: dict[str, Any] = field(default_factory=dict)

    async def attest(self, token: str | None, body: Any = None, *, headers: dict[str, str] | None = None,
                     raw: bytes | None = None) -> httpx.Response:
        out = dict(headers or {})
        if token is not None:
            out["Authorization"] = f"Bearer {token}"
        if raw is not None:
            out.setdefault("Content-Type", "application/json")
            return await self.client.post("/v1/attestations", content=raw, headers=out)
        return await self.client.post("/v1/attestations", json=body or {"check": "migrations", "outcome": "success"},
                                      headers=out)

    def gh_token(self, **overrides: Any) -> str:
        return self.gh.github_token(self.now, **overrides)

    def raw_exp_token(self, exp_text: str) -> str:
        """A correctly signed GitHub token whose payload writes exp as `exp_text`, verbatim."""
        claims = self.gh.github_claims(self.now)
        claims["exp"] = "@EXP@"
        payload = json.dumps(claims).replace('"@EXP@"', exp_text).encode()
        key = self.gh.key("RS256")
        return PyJWS().encode(payload, key.private, algorithm="RS256", headers={"kid": key.kid})

    async def github_hook(self, payload: dict[str, Any], *, event: str = "workflow_run", secret: str = GH_SECRET,
                          signature: str | None = None, delivery: str = "d-1", raw: bytes | None = None) -> httpx.Response:
        body = raw if raw is not None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
                   "X-Hub-Signature-256": signature if signature is not None else sig.github_sign(secret, body),
                   # the test issuer stands for a GitHub Enterprise Server: its bindings' ids are of its host
                   "X-GitHub-Enterprise-Host": self.gh.host}
        headers = {k: v for k, v in headers.items() if v != ""}
        return await self.client.post("/v1/webhooks/github", content=body, headers=headers)

    async def std_hook(self, body: dict[str, Any] | bytes, *, key: bytes = CANARY_KEY, message_id: str = "msg-1",
                       timestamp: str | None = None, signature: str | None = None, signed_body: bytes | None = None,
                       source: str = "nightly-canary", drop: tuple[str, ...] = ()) -> httpx.Response:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        stamp = timestamp if timestamp is not None else str(int(self.now))
        if signature is None:
            signature = sig.standard_sign(key, message_id, int(stamp), signed_body if signed_body is not None else raw)
        headers = {"Content-Type": "application/json", "webhook-id": message_id, "webhook-timestamp": stamp,
                   "webhook-signature": signature}
        for name in drop:
            headers.pop(name)
        return await self.client.post(f"/v1/webhooks/{source}", content=raw, headers=headers)


def workflow_run(**overrides: Any) -> dict[str, Any]:
    run = {
        "id": 30433642, "name": "migrations", "run_attempt": 1, "event": "push", "status": "completed",
        "conclusion": "success", "head_branch": "main", "head_sha": "acb5820ced9479c074f688cc328bf03f341a511d",
        "path": ".github/workflows/ci.yml", "html_url": "https://github.com/acme/api/actions/runs/30433642",
        "head_repository": {"id": 123456, "full_name": "acme/api"},
    }
    run.update(overrides)
    return {"action": "completed", "workflow_run": run,
            "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890, "login": "acme"}}}


def segments(token: str) -> list[str]:
    return token.split(".")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def forge(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"sig") -> str:
    return ".".join([b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), b64(signature)])


Send = Callable[[Ctx], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Case:
    name: str
    send: Send
    status: int
    code: str | None = None  # error.code expected (None: a 2xx answer)
    reason: str | None = None  # counted:false reason, recorded but no vote
    fetch: bool = True  # False: the gateway must not have contacted any issuer
    setup: Send | None = None  # runs first; what it records is the baseline


async def _replay_setup(ctx: Ctx) -> httpx.Response:
    ctx.extra["token"] = ctx.gh_token()
    response = await ctx.attest(ctx.extra["token"])
    assert response.status_code == 201
    return response


async def _github_delivered(ctx: Ctx) -> httpx.Response:
    response = await ctx.github_hook(workflow_run(), delivery="d-1")
    assert response.status_code == 201, response.text
    return response


async def _std_delivered(ctx: Ctx) -> httpx.Response:
    response = await ctx.std_hook({"check": "migrations", "outcome": "success"}, message_id="msg-7")
    assert response.status_code == 201, response.text
    return response


def _hs256_with_public_key(ctx: Ctx) -> str:
    pem = ctx.gh.key("RS256").private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "kid": ctx.gh.key("RS256").kid, "typ": "JWT"}
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(ctx.gh.github_claims(ctx.now)).encode())
    import hashlib
    import hmac

    mac = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64(mac)


def _tampered(ctx: Ctx) -> str:
    token = ctx.gh_token()
    head, _, signature = segments(token)
    claims = ctx.gh.github_claims(ctx.now, repository_id="999999")
    return ".".join([head, b64(json.dumps(claims).encode()), signature])


def _truncated(ctx: Ctx) -> str:
    head, body, signature = segments(ctx.gh_token())
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    return ".".join([head, body, b64(raw[:-10])])


def _attacker_signed(ctx: Ctx, header: dict[str, Any]) -> str:
    claims = ctx.gh.github_claims(ctx.now)
    real_kid = ctx.gh.key("RS256").kid
    return ctx.attacker.mint(claims, key=ctx.attacker.key("RS256"), headers={"kid": real_kid, **header})


GOOD = {"check": "migrations", "outcome": "success"}

CASES = [
    # -- the credential itself ----------------------------------------------------
    Case("no credential", lambda c: c.attest(None), 401, "missing_credential", fetch=False),
    Case("empty bearer", lambda c: c.attest(None, headers={"Authorization": "Bearer "}), 401, "missing_credential", fetch=False),
    Case("basic scheme", lambda c: c.attest(None, headers={"Authorization": "Basic YTpi"}), 401, "missing_credential", fetch=False),
    Case("two segments", lambda c: c.attest("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0"), 401, "malformed_token", fetch=False),
    Case("header not base64url", lambda c: c.attest("!!!." + segments(c.gh_token())[1] + ".abc"), 401, "malformed_token", fetch=False),
    Case("header not an object", lambda c: c.attest(b64(b"[1,2]") + "." + segments(c.gh_token())[1] + ".abc"), 401,
         "malformed_token", fetch=False),
    Case("alg none", lambda c: c.attest(forge({"alg": "none", "kid": "k"}, c.gh.github_claims(c.now)) .rsplit(".", 1)[0] + ".x"),
         401, "alg_not_allowed", fetch=False),
    Case("HS256 keyed with the issuer's public key", lambda c: c.attest(_hs256_with_public_key(c)), 401, "alg_not_allowed",
         fetch=False),
    Case("HS256 keyed with the webhook secret",
         lambda c: c.attest(jwt.encode(c.gh.github_claims(c.now), GH_SECRET, algorithm="HS256", headers={"kid": "k"})),
         401, "alg_not_allowed", fetch=False),
    Case("RS384 (off the allow-list)",
         lambda c: c.attest(jwt.encode(c.gh.github_claims(c.now), c.gh.key("RS256").private, algorithm="RS384",
                                       headers={"kid": c.gh.key("RS256").kid})), 401, "alg_not_allowed", fetch=False),
    Case("foreign jku never followed", lambda c: c.attest(_attacker_signed(c, {"jku": c.attacker.url + "/.well-known/jwks"})),
         401, "invalid_signature"),
    Case("embedded jwk never used",
         lambda c: c.attest(_attacker_signed(c, {"jwk": c.attacker.key("RS256").public_jwk()})), 401, "invalid_signature"),
    Case("x5u never followed", lambda c: c.attest(_attacker_signed(c, {"x5u": c.attacker.url + "/cert.pem"})), 401,
         "invalid_signature"),
    Case("path-like kid", lambda c: c.attest(c.gh_token(headers={"kid": "../../dev/null"})), 401, "unknown_kid"),
    Case("SQL-like kid", lambda c: c.attest(c.gh_token(headers={"kid": "' OR 1=1--"})), 401, "unknown_kid"),
    Case("10 kB kid", lambda c: c.attest(c.gh_token(headers={"kid": "k" * 10_000})), 401, "unknown_kid", fetch=False),
    Case("integer kid", lambda c: c.attest(forge({"alg": "RS256", "kid": 7}, c.gh.github_claims(c.now))), 401,
         "unknown_kid", fetch=False),
    Case("no kid", lambda c: c.attest(forge({"alg": "RS256"}, c.gh.github_claims(c.now))), 401, "unknown_kid", fetch=False),
    Case("key of another issuer", lambda c: c.attest(c.gh.mint(c.gh.github_claims(c.now), key=c.gl.key("RS256"))),
         401, "unknown_kid"),
    Case("another issuer's key under this issuer's kid",
         lambda c: c.attest(c.gh.mint(c.gh.github_claims(c.now), key=c.gl.key("RS256"),
                                      headers={"kid": c.gh.key("RS256").kid})), 401, "invalid_signature"),
    Case("tampered payload", lambda c: c.attest(_tampered(c)), 401, "invalid_signature"),
    Case("truncated signature", lambda c: c.attest(_truncated(c)), 401, "invalid_signature"),
    Case("oversize token", lambda c: c.attest("a." + "b" * 17_000 + ".c"), 431, "header_too_large", fetch=False),
    # -- issuer, audience, times, claims ----------------------------------------------
    Case("unknown issuer", lambda c: c.attest(c.gh_token(iss="https://ci.evil.example")), 401, "unknown_issuer", fetch=False),
    Case("issuer with a trailing slash", lambda c: c.attest(c.gh_token(iss=c.gh.url + "/")), 401, "unknown_issuer", fetch=False),
    Case("issuer over https instead", lambda c: c.attest(c.gh_token(iss=c.gh.url.replace("http:", "https:"))), 401,
         "unknown_issuer", fetch=False),
    Case("no iss", lambda c: c.attest(c.gh_token(iss=None)), 401, "missing_claim", fetch=False),
    Case("GitHub's default audience", lambda c: c.attest(c.gh_token(aud="https://github.com/acme")), 401, "invalid_audience"),
    Case("audience list with another", lambda c: c.attest(c.gh_token(aud=["relayroom", "vault"])), 401, "invalid_audience"),
    Case("expired beyond the leeway", lambda c: c.attest(c.gh_token(exp=int(c.now) - 61)), 401, "token_expired"),
    Case("nbf beyond the leeway", lambda c: c.attest(c.gh_token(nbf=int(c.now) + 120)), 401, "token_not_yet_valid"),
    Case("iat beyond the leeway", lambda c: c.attest(c.gh_token(iat=int(c.now) + 120)), 401, "token_not_yet_valid"),
    Case("exp is a word", lambda c: c.attest(c.gh_token(exp="soon")), 401, "invalid_claim"),
    # PyJWT writes float("inf") as `Infinity`, which is not JSON (RFC 8259): refused as malformed.
    Case("exp is infinite", lambda c: c.attest(c.gh_token(exp=float("inf"))), 401, "malformed_token"),
    Case("exp is 1e400 (a JSON number past any float)", lambda c: c.attest(c.raw_exp_token("1e400")), 401, "malformed_token"),
    Case("exp is true", lambda c: c.attest(c.gh_token(exp=True)), 401, "invalid_claim"),
    Case("no jti", lambda c: c.attest(c.gh_token(jti=None)), 401, "missing_claim"),
    Case("no repository_id claim", lambda c: c.attest(c.gh_token(repository_id=None)), 401, "missing_claim"),
    Case("replayed jti", lambda c: c.attest(c.extra["token"]), 409, "token_reused", setup=_replay_setup),
    # -- the binding -----------------------------------------------------------------
    Case("same name, other repository_id (resurrection)", lambda c: c.attest(c.gh_token(repository_id="654321")), 403,
         "binding_mismatch"),
    Case("other repository_owner_id", lambda c: c.attest(c.gh_token(repository_owner_id="1111")), 403, "binding_mismatch"),
    Case("branch the binding does not list", lambda c: c.attest(c.gh_token(ref="refs/heads/feature")), 403, "binding_mismatch"),
    Case("tag named like the branch", lambda c: c.attest(c.gh_token(ref="refs/tags/main")), 403, "binding_mismatch"),
    Case("workflow the binding does not list",
         lambda c: c.attest(c.gh_token(workflow_path=".github/workflows/other.yml")), 403, "binding_mismatch"),
    Case("reusable workflow of a foreign repository",
         lambda c: c.attest(c.gh_token(job_workflow_ref="evil/tools/.github/workflows/ci.yml@refs/heads/main")), 403,
         "binding_mismatch"),
    Case("pull_request_target", lambda c: c.attest(c.gh_token(event_name="pull_request_target")), 403, "event_not_allowed"),
    Case("body names another project", lambda c: c.attest(c.gh_token(), {**GOOD, "project": "beta"}), 403,
         "project_mismatch"),
    Case("GitLab project id differs", lambda c: c.attest(c.gl.gitlab_token(c.now, project_id="43")), 403, "binding_mismatch"),
    Case("GitLab branch not listed", lambda c: c.attest(c.gl.gitlab_token(c.now, ref="feature")), 403, "binding_mismatch"),
    Case("GitLab tag named main", lambda c: c.attest(c.gl.gitlab_token(c.now, ref_type="tag")), 403, "binding_mismatch"),
    Case("GitLab merge request pipeline",
         lambda c: c.attest(c.gl.gitlab_token(c.now, pipeline_source="merge_request_event")), 403, "event_not_allowed"),
    Case("check posted by a workflow it does not name", lambda c: c.attest(c.gh_token(), {"check": "deploy", "outcome": "success"}),
         201, reason="workflow_not_allowed"),
    # -- the body -----------------------------------------------------------------------
    Case("unknown body field", lambda c: c.attest(c.gh_token(), {**GOOD, "trusted": True}), 422, "unknown_field", fetch=False),
    Case("check of 201 characters", lambda c: c.attest(c.gh_token(), {"check": "x" * 201, "outcome": "success"}), 422,
         "invalid_check", fetch=False),
    Case("outcome off the list", lambda c: c.attest(c.gh_token(), {"check": "migrations", "outcome": "passed"}), 422,
         "invalid_outcome", fetch=False),
    Case("body not JSON", lambda c: c.attest(c.gh_token(), raw=b"check=migrations"), 400, "malformed_json", fetch=False),
    Case("body over 64 KiB", lambda c: c.attest(c.gh_token(), raw=b'{"check": "' + b"x" * 70_000 + b'"}'), 413,
         "body_too_large", fetch=False),
    # -- Standard Webhooks -------------------------------------------------------------------
    Case("webhook without signature headers", lambda c: c.std_hook(GOOD, drop=("webhook-signature",)), 401, "invalid_signature"),
    Case("webhook signature garbage", lambda c: c.std_hook(GOOD, signature="garbage"), 401, "invalid_signature"),
    Case("webhook signature v1,a,b", lambda c: c.std_hook(GOOD, signature="v1,a,b"), 401, "invalid_signature"),
    Case("webhook signature v1,!!", lambda c: c.std_hook(GOOD, signature="v1,!!"), 401, "invalid_signature"),
    Case("webhook signature only v1a", lambda c: c.std_hook(GOOD, signature="v1a," + "A" * 86 + "=="), 401, "invalid_signature"),
    Case("webhook 301 s old", lambda c: c.std_hook(GOOD, timestamp=str(int(c.now) - 301)), 401, "stale_webhook"),
    Case("webhook 301 s ahead", lambda c: c.std_hook(GOOD, timestamp=str(int(c.now) + 301)), 401, "stale_webhook"),
    Case("webhook timestamp nan", lambda c: c.std_hook(GOOD, timestamp="nan", signature="v1," + "A" * 43 + "="), 401,
         "invalid_signature"),
    Case("webhook timestamp 1e30", lambda c: c.std_hook(GOOD, timestamp="1e30", signature="v1," + "A" * 43 + "="), 401,
         "invalid_signature"),
    Case("webhook timestamp -1", lambda c: c.std_hook(GOOD, timestamp="-1", signature="v1," + "A" * 43 + "="), 401,
         "invalid_signature"),
    Case("webhook body byte flipped",
         lambda c: c.std_hook(b'{"check": "migrations", "outcome": "success"} ',
                              signed_body=b'{"check": "migrations", "outcome": "success"}'), 401, "invalid_signature"),
    Case("webhook body not UTF-8", lambda c: c.std_hook(b'{"check": "\xff\xfe"}'), 400, "malformed_json"),
    Case("another project's secret", lambda c: c.std_hook(GOOD, key=BETA_KEY), 401, "invalid_signature"),
    Case("unknown webhook source", lambda c: c.std_hook(GOOD, source="nobody"), 404, "unknown_source"),
    Case("webhook-id replayed", lambda c: c.std_hook(GOOD, message_id="msg-7"), 200, setup=_std_delivered),
    # -- GitHub webhooks -----------------------------------------------------------------------
    Case("GitHub webhook unsigned", lambda c: c.github_hook(workflow_run(), signature=""), 401, "invalid_signature"),
    Case("GitHub webhook SHA-1 only",
         lambda c: c.github_hook(workflow_run(), signature="sha1=" + "0" * 40), 401, "invalid_signature"),
    Case("GitHub webhook truncated signature",
         lambda c: c.github_hook(workflow_run(), signature=sig.github_sign(GH_SECRET, json.dumps(workflow_run()).encode())[:-2]),
         401, "invalid_signature"),
    Case("GitHub webhook wrong secret", lambda c: c.github_hook(workflow_run(), secret="not-the-secret"), 401,
         "invalid_signature"),
    Case("forged check_run", lambda c: c.github_hook({"action": "completed", "check_run": {"name": "migrations",
         "conclusion": "success"}, "repository": {"id": 123456}}, event="check_run"), 200),
    Case("check_run relabelled as workflow_run", lambda c: c.github_hook({"action": "completed", "check_run": {
         "name": "migrations", "conclusion": "success"}, "repository": {"id": 123456}}), 200),
    Case("workflow_run from a fork", lambda c: c.github_hook(workflow_run(head_repository={"id": 999, "full_name": "evil/api"})),
         200),
    Case("workflow_run on a branch the binding does not list", lambda c: c.github_hook(workflow_run(head_branch="feature")), 200),
    Case("workflow_run of an unlisted workflow", lambda c: c.github_hook(workflow_run(path=".github/workflows/evil.yml")), 200),
    Case("workflow_run of pull_request_target", lambda c: c.github_hook(workflow_run(event="pull_request_target")), 200),
    Case("workflow_run replayed with a new delivery id", lambda c: c.github_hook(workflow_run(), delivery="d-2"), 200,
         setup=_github_delivered),
]


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 35
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.fixture
def attacker() -> Any:
    with OidcIssuer() as running:
        yield running


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_hostile_input_is_refused_and_records_nothing(
    case: Case, hub: Any, client: httpx.AsyncClient, issuer: OidcIssuer, gitlab_issuer: OidcIssuer, attacker: OidcIssuer,
    checkmap_dir: Any, clock: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    entry = await learn(hub, "acme", "Migrations run in staging before production.")
    monkeypatch.setenv("ACME_GH_WEBHOOK_SECRET", GH_SECRET)
    monkeypatch.setenv("ACME_CANARY_SECRET", "whsec_" + base64.b64encode(CANARY_KEY).decode())
    monkeypatch.setenv("BETA_CANARY_SECRET", "whsec_" + base64.b64encode(BETA_KEY).decode())
    bindings = (
        github_binding(issuer.url, extra="    workflows: [.github/workflows/ci.yml]\n"
                                         "    webhook_secret_env: ACME_GH_WEBHOOK_SECRET")
        + gitlab_binding(gitlab_issuer.url)
        + "\n  - provider: webhook\n    source: nightly-canary\n    secret_env: ACME_CANARY_SECRET\n"
    )
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", bindings, {"migrations": [entry], "deploy": [entry]},
        {"deploy": "workflows: [.github/workflows/deploy.yml]"}))
    beta = (github_binding(issuer.url).replace('"123456"', '"555"').replace('"7890"', '"556"')
            + "\n  - provider: webhook\n    source: beta-canary\n    secret_env: BETA_CANARY_SECRET\n")
    registry = await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", beta, {}))
    assert all(row["error"] is None for row in registry.status()), registry.status()

    ctx = Ctx(hub=hub, client=client, gh=issuer, gl=gitlab_issuer, attacker=attacker, entry=entry, now=clock.now())
    if case.setup is not None:
        await case.setup(ctx)
    before = await counts(hub)
    supports_before = len((await hub.knowledge.get(await _owner(hub), entry)).supports)
    fetched_before = issuer.fetches + gitlab_issuer.fetches

    response = await case.send(ctx)

    assert response.status_code == case.status, response.text
    body = response.json()
    after = await counts(hub)
    if case.code is not None:
        assert set(body) == {"error"}
        assert body["error"]["code"] == case.code, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        assert after == before
    elif case.reason is not None:
        assert body["counted"] is False and body["reason"] == case.reason
        assert body["supports"] == [] and body["promoted"] == []
        assert after["attestations"] == before["attestations"] + 1  # kept, with no vote
        assert after["supports"] == before["supports"] and after["audit"] == before["audit"]
    else:
        assert body.get("recorded") is False, body
        assert after == before
    if not case.fetch:
        assert issuer.fetches + gitlab_issuer.fetches == fetched_before == 0
    assert attacker.fetches == 0  # a key or URL named in a token header is never followed
    assert "eyJ" not in response.text  # the token itself is never echoed
    entry_now = await hub.knowledge.get(await _owner(hub), entry)
    assert entry_now.state == "candidate" and len(entry_now.supports) == supports_before


async def _owner(hub: Any) -> Any:
    from gateway.knowledge.model import Principal

    return Principal(await hub.accounts.project("acme"), "olivia", "owner")
