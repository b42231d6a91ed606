"""Token peeking and decoding: the faster segment check behaves exactly as
PyJWT's own, time claims follow the 60 s leeway on the hub's clock, and the
provider helpers read workflows and refs the way the forges write them."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt import PyJWK

from gateway.core.errors import Forbidden, Unauthorized
from gateway.ci.oidc import token as jwt_token
from gateway.ci.providers import gitlab, workflows
from gateway.ci.providers.github import GitHubActions
from tests.support.oidc_issuer import OidcIssuer

SEGMENTS = [b"", b"e30", b"e30=", b"e30==", b"e30===", b"YWJj", b"YWJjZA", b"YWJjZA==", b"YWJjZA=", b"YWJjZB", b"!!!!",
            b"YW Jj", b"YWJj\n", b"a", b"abcde", b"YWJjZA==YW", b"_-_-", b"+/+/", "é".encode()]


def _reference_segment(segment: str) -> bytes | None:
    """What `peek` must accept, written plainly: the base64url alphabet only,
    no padding, a length base64 can have, and canonical (re-encodes to itself)."""
    import base64
    import re

    if not re.fullmatch(r"[A-Za-z0-9_-]+", segment) or len(segment) % 4 == 1:
        return None
    raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    return raw if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == segment else None


def _peek_segment(segment: str) -> bytes | None:
    try:
        return jwt_token._segment_bytes(segment, "payload")
    except Unauthorized as refused:
        assert refused.code == "malformed_token"
        return None


@pytest.mark.parametrize("segment", [s.decode("latin-1") for s in SEGMENTS] + ["QQ", "QR", "QQ=", "QUI", "QUJ", "QUI=", "Q Q", "\u0661\u0662"])
def test_peek_segments_are_strict_base64url(segment: str) -> None:
    assert _peek_segment(segment) == _reference_segment(segment)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=40).map(lambda b: __import__("base64").urlsafe_b64encode(b).decode().rstrip("="))
       | st.text(alphabet="ABCDQRSTabcz0189-_+/= \n\u00e9", max_size=12))
def test_peek_segments_agree_with_the_plain_reference(segment: str) -> None:
    assert _peek_segment(segment) == _reference_segment(segment)


@pytest.fixture(scope="module")
def running_issuer() -> Any:
    with OidcIssuer() as issuer:
        yield issuer


def verify(issuer: OidcIssuer, token: str, now: float, alg: str = "RS256") -> dict[str, Any]:
    peeked = jwt_token.peek(token)
    key = PyJWK(issuer.key(alg).public_jwk())
    return jwt_token.decode(token, key, issuer=issuer.url, audience="relayroom", now=now, peeked=peeked)


def test_decoding_matches_stock_pyjwt(running_issuer: OidcIssuer) -> None:
    now = time.time()
    token = running_issuer.github_token(now)
    ours = verify(running_issuer, token, now)
    stock = jwt.decode(token, PyJWK(running_issuer.key("RS256").public_jwk()), algorithms=["RS256"], audience="relayroom",
                       issuer=running_issuer.url)
    assert ours == stock


# -- decode against PyJWT's own verdicts -----------------------------------------------------

_STOCK_OPTIONS: Any = {
    "verify_signature": True, "require": list(jwt_token.REQUIRED_CLAIMS), "verify_iss": True, "verify_aud": True,
    "strict_aud": False, "verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_sub": True,
    "verify_jti": True, "enforce_minimum_key_length": False,
}


def _stock_verdict(token: str, key: PyJWK, issuer: str, now: float) -> str:
    """What `jwt.PyJWT().decode` says of the token (the time claims left to the
    hub's clock, as the gateway does), then the gateway's own stricter rules:
    "ok" or the refusal's code."""
    try:
        jwt_token.peek(token)
        jwt.PyJWT().decode(token, key=key, algorithms=list(jwt_token.ALGORITHMS), audience="relayroom", issuer=issuer,
                           leeway=60, options=_STOCK_OPTIONS)
    except jwt.PyJWTError as exc:
        return jwt_token._refusal(exc, "relayroom").code
    except Unauthorized as refused:
        return refused.code
    claims = jwt_token.peek(token).claims
    try:
        aud = claims["aud"]
        if isinstance(aud, list) and any(item != "relayroom" for item in aud):
            return "invalid_audience"
        jwt_token.check_times(claims, now)
    except Unauthorized as refused:
        return refused.code
    return "ok" if 0 < len(claims["jti"]) <= 256 else "invalid_claim"


_VARIANTS: dict[str, list[Any]] = {
    "iss": [None, 7, "", "https://elsewhere.example", ["x"]],
    "aud": [None, ["relayroom"], ["relayroom", "vault"], [], "vault", 5, ["relayroom", 5], {"a": 1}, [["relayroom"]]],
    "exp": [None, "soon", 1.5, True, -1, 10**12],
    "iat": [None, "x", float(10**9)],
    "nbf": ["x", 0],
    "jti": [None, "", 5, "j" * 257, ["a"], "ok"],
    "sub": [None, 5, "repo:acme/api:ref:refs/heads/main"],
}


@settings(max_examples=600, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(_VARIANTS)), st.integers(0, 10), max_size=3),
       drop=st.lists(st.sampled_from(sorted(_VARIANTS)), max_size=2, unique=True),
       signer=st.sampled_from(["issuer", "issuer", "other key", "es256 key", "tampered"]))
def test_decode_agrees_with_pyjwts_decode(running_issuer: OidcIssuer, changes: dict[str, int], drop: list[str],
                                          signer: str) -> None:
    """The claim rules written out in `decode` give PyJWT's verdict on every
    token: accepted the same, refused with the same code."""
    import base64
    import json

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    now = time.time()
    claims = running_issuer.github_claims(now)
    for name, pick in changes.items():
        options = _VARIANTS[name]
        claims[name] = options[pick % len(options)]
    for name in drop:
        claims.pop(name, None)
    if claims.get("iss") is None or not isinstance(claims.get("iss"), str) or not claims["iss"]:
        claims["iss"] = running_issuer.url  # peek refuses these before decode is reached
    rsa = running_issuer.key("RS256")
    signing_key = running_issuer.key("ES256") if signer == "es256 key" else rsa
    header = {"alg": signing_key.alg, "kid": signing_key.kid, "typ": "JWT"}
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    private = signing_key.private
    if signer == "other key":
        from tests.support.oidc_issuer import pooled_key
        private = pooled_key("RS256")
    signature = jwt.get_algorithm_by_name(signing_key.alg).sign(signing_input.encode(), private)
    if signer == "tampered":
        signature = bytes([signature[0] ^ 1]) + signature[1:]
    token = f"{signing_input}.{b64(signature)}"
    key = PyJWK(rsa.public_jwk())  # the key the gateway holds for that kid
    try:
        ours = "ok"
        jwt_token.decode(token, key, issuer=running_issuer.url, audience="relayroom", now=now)
    except Unauthorized as refused:
        ours = refused.code
    assert ours == _stock_verdict(token, key, running_issuer.url, now), (claims, signer)


def test_es256_tokens_verify(running_issuer: OidcIssuer) -> None:
    now = time.time()
    token = running_issuer.mint(running_issuer.github_claims(now), key=running_issuer.key("ES256"))
    assert verify(running_issuer, token, now, "ES256")["repository_id"] == "123456"


@pytest.mark.parametrize("claim,offset,code", [
    ("exp", -59, None), ("exp", -60, "token_expired"), ("exp", -61, "token_expired"),
    ("nbf", 5, None), ("nbf", 60, None), ("nbf", 61, "token_not_yet_valid"),
    ("iat", 59, None), ("iat", 120, "token_not_yet_valid"),
])
def test_the_leeway_is_60_seconds_on_the_hubs_clock(running_issuer: OidcIssuer, claim: str, offset: int,
                                                    code: str | None) -> None:
    now = 1_900_000_000.0  # the hub's clock, far from the wall clock: PyJWT's own time checks must not run
    token = running_issuer.github_token(now, **{claim: int(now) + offset})
    if code is None:
        verify(running_issuer, token, now)
    else:
        with pytest.raises(Unauthorized) as refused:
            verify(running_issuer, token, now)
        assert refused.value.code == code


def test_an_audience_list_holding_only_ours_is_accepted(running_issuer: OidcIssuer) -> None:
    now = time.time()
    assert verify(running_issuer, running_issuer.github_token(now, aud=["relayroom"]), now)["aud"] == ["relayroom"]


def test_a_peek_of_another_token_is_ignored(running_issuer: OidcIssuer) -> None:
    now = time.time()
    good = running_issuer.github_token(now)
    forged = running_issuer.github_token(now, repository_id="999")[:-8] + "AAAAAAAA"
    key = PyJWK(running_issuer.key("RS256").public_jwk())
    with pytest.raises(Unauthorized) as refused:
        jwt_token.decode(forged, key, issuer=running_issuer.url, audience="relayroom", now=now,
                         peeked=jwt_token.peek(good))
    assert refused.value.code == "invalid_signature"  # the forged signature was checked, not the hinted one
    unhinted = jwt_token.decode(good, key, issuer=running_issuer.url, audience="relayroom", now=now)
    assert unhinted == verify(running_issuer, good, now)


def test_a_refused_decode_leaves_nothing_behind(running_issuer: OidcIssuer) -> None:
    now = time.time()
    with pytest.raises(Unauthorized):
        verify(running_issuer, running_issuer.github_token(now, aud="other"), now)
    assert verify(running_issuer, running_issuer.github_token(now), now)["aud"] == "relayroom"


@pytest.mark.parametrize("extra,code", [
    ({"b64": False}, "invalid_token"),  # b64 without crit
    ({"b64": False, "crit": ["b64", "x"]}, "invalid_token"),
    ({"b64": False, "crit": "b64"}, "invalid_token"),
    ({"b64": False, "crit": ["b64"]}, "malformed_token"),  # well formed, but no payload travels beside a CI token
])
def test_an_unencoded_payload_header_is_refused_for_pyjwts_reason(running_issuer: OidcIssuer, extra: dict[str, Any],
                                                                   code: str) -> None:
    import base64
    import json

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    now = time.time()
    key = running_issuer.key("RS256")
    # Built by hand: jwt.encode would rewrite such a header (and drop the payload).
    signing_input = b64(json.dumps({"alg": "RS256", "kid": key.kid, **extra}).encode()) + "." + \
        b64(json.dumps(running_issuer.github_claims(now)).encode())
    token = signing_input + "." + b64(jwt.get_algorithm_by_name("RS256").sign(signing_input.encode(), key.private))
    with pytest.raises(Unauthorized) as refused:
        verify(running_issuer, token, now)
    assert refused.value.code == code


def test_padding_is_refused_before_any_work() -> None:
    with pytest.raises(Unauthorized) as refused:
        jwt_token.peek("eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ==.e30.c2ln")
    assert refused.value.code == "malformed_token"


# -- provider helpers ----------------------------------------------------------------------


def gh_binding(**fields: Any) -> GitHubActions:
    base = dict(project="acme", file="acme.yaml", line=3, issuer="https://token.actions.githubusercontent.com",
                repository_id="123456", refs=("refs/heads/main",))
    base.update(fields)
    return GitHubActions(**base)


@pytest.mark.parametrize("job_workflow_ref,patterns,ok", [
    ("acme/api/.github/workflows/ci.yml@refs/heads/main", (".github/workflows/ci.yml",), True),
    ("Acme/API/.github/workflows/ci.yml@refs/heads/main", (".github/workflows/ci.yml",), True),
    ("acme/api/.github/workflows/ci.yml@refs/heads/main", (".github/workflows/other.yml",), False),
    ("acme/shared/.github/workflows/test.yml@refs/tags/v2", ("acme/shared/.github/workflows/test.yml",), True),
    ("acme/shared/.github/workflows/test.yml@refs/tags/v2", ("acme/shared/.github/workflows/test.yml@refs/tags/v2",), True),
    ("acme/shared/.github/workflows/test.yml@refs/heads/dev", ("acme/shared/.github/workflows/test.yml@refs/tags/v2",), False),
    ("evil/shared/.github/workflows/test.yml@refs/tags/v2", ("acme/shared/.github/workflows/test.yml",), False),
    ("evil/api/.github/workflows/ci.yml@refs/heads/main", (".github/workflows/ci.yml",), False),
])
def test_workflows_name_the_workflow_that_ran(job_workflow_ref: str, patterns: tuple[str, ...], ok: bool) -> None:
    claims = {"repository": "acme/api", "job_workflow_ref": job_workflow_ref}
    assert workflows.names(patterns, GitHubActions.workflow_of(claims), GitHubActions.home(claims)) is ok


def test_gitlab_config_paths() -> None:
    ref = workflows.parse_gitlab("gitlab.example.com/acme/api//.gitlab-ci.yml@refs/heads/main")
    assert ref == workflows.WorkflowRef("acme/api", ".gitlab-ci.yml", "refs/heads/main")
    assert workflows.names((".gitlab-ci.yml",), ref, "acme/api")
    assert workflows.names(("acme/api//.gitlab-ci.yml",), ref, None)
    assert not workflows.names(("acme/other//.gitlab-ci.yml",), ref, "acme/api")


@pytest.mark.parametrize("refs,ref,ref_type,ok", [
    (("main",), "main", "branch", True),
    (("main",), "main", "tag", False),
    (("refs/tags/v1",), "v1", "tag", True),
    (("refs/heads/main",), "main", "branch", True),
    (("*",), "anything", "tag", True),
    (("main",), "feature", "branch", False),
])
def test_gitlab_refs(refs: tuple[str, ...], ref: str, ref_type: str, ok: bool) -> None:
    assert gitlab.listed(refs, gitlab.qualified_ref({"ref": ref, "ref_type": ref_type})) is ok


def test_github_refusals_name_the_claim_the_expectation_and_the_value() -> None:
    claims = {"event_name": "push", "ref": "refs/heads/feature", "ref_type": "branch", "repository": "acme/api",
              "repository_id": "123456", "job_workflow_ref": "acme/api/.github/workflows/ci.yml@refs/heads/feature"}
    with pytest.raises(Forbidden) as refused:
        gh_binding().authorize(claims)
    message = refused.value.message
    assert refused.value.code == "binding_mismatch" and refused.value.extra == {"claim": "ref"}
    assert "ref:" in message and "refs/heads/main" in message and "refs/heads/feature" in message and "acme.yaml:3" in message


def test_pull_request_target_is_allowed_only_by_name() -> None:
    claims = {"event_name": "pull_request_target", "ref": "refs/heads/main", "ref_type": "branch",
              "repository": "acme/api", "repository_id": "123456", "job_workflow_ref": "acme/api/.github/workflows/ci.yml@refs/heads/main"}
    with pytest.raises(Forbidden) as refused:
        gh_binding().authorize(claims)
    assert refused.value.code == "event_not_allowed"
    gh_binding(allow_events=("pull_request_target",)).authorize(claims)
