"""The per-issuer key cache against a real issuer on 127.0.0.1: discovery,
one parse per fetch, rotation, outages, and the one-refresh-per-60-s rule
that holds across processes (two caches sharing one store)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from jwt import PyJWK

from gateway.core.errors import Unauthorized, Unavailable
from gateway.ci.oidc.fetch import JsonFetcher, url_allowed
from gateway.ci.oidc.keys import KeyCache, parse_jwks
from tests.support.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.support.oidc_issuer import OidcIssuer, pooled_key


@pytest.fixture
async def cache(hub: Any) -> Any:
    fetcher = JsonFetcher(allow_insecure=True)
    yield KeyCache(clock=hub.clock, driver=hub.driver, fetcher=fetcher, metrics=hub.metrics)
    await fetcher.close()


async def test_first_use_discovers_and_later_uses_fetch_nothing(cache: KeyCache, issuer: OidcIssuer) -> None:
    key = await cache.key_for(issuer.url, issuer.key("RS256").kid)
    assert isinstance(key, PyJWK) and key.algorithm_name == "RS256"
    assert issuer.hits == {"/.well-known/openid-configuration": 1, "/.well-known/jwks": 1}
    ec_key = await cache.key_for(issuer.url, issuer.key("ES256").kid)
    assert ec_key.algorithm_name == "ES256"
    for _ in range(20):
        await cache.key_for(issuer.url, issuer.key("RS256").kid)
    assert issuer.fetches == 2


async def test_a_rotated_key_costs_one_refresh(cache: KeyCache, issuer: OidcIssuer, clock: Any) -> None:
    await cache.key_for(issuer.url, issuer.key("RS256").kid)
    clock.advance(61)
    new = issuer.rotate("RS256")
    assert (await cache.key_for(issuer.url, new.kid)).algorithm_name == "RS256"
    assert issuer.hits["/.well-known/jwks"] == 2


async def test_unknown_kids_trigger_at_most_one_refresh_per_60_s(cache: KeyCache, issuer: OidcIssuer, clock: Any) -> None:
    await cache.key_for(issuer.url, issuer.key("RS256").kid)
    clock.advance(61)
    codes = []
    for _ in range(200):
        try:
            await cache.key_for(issuer.url, uuid.uuid4().hex)
        except (Unauthorized, Unavailable) as refusal:
            codes.append((refusal.status, refusal.code, refusal.retry_after))
    assert codes[0] == (401, "unknown_kid", None)  # the one refresh happened and the kid is not there
    assert {c[:2] for c in codes[1:]} == {(503, "jwks_unavailable")}
    assert all(1 <= c[2] <= 60 for c in codes[1:])
    assert issuer.hits["/.well-known/jwks"] == 2
    # A key rotated in during the cooldown answers 503 (retry), then works.
    new = issuer.rotate("ES256")
    with pytest.raises(Unavailable) as waiting:
        await cache.key_for(issuer.url, new.kid)
    assert waiting.value.retry_after == 60
    clock.advance(60)
    assert (await cache.key_for(issuer.url, new.kid)).algorithm_name == "ES256"
    assert issuer.hits["/.well-known/jwks"] == 3


async def test_concurrent_misses_share_one_refresh(cache: KeyCache, issuer: OidcIssuer, clock: Any) -> None:
    await cache.key_for(issuer.url, issuer.key("RS256").kid)
    clock.advance(61)
    new = issuer.rotate("RS256")
    keys = await asyncio.gather(*(cache.key_for(issuer.url, new.kid) for _ in range(20)))
    assert all(k is keys[0] for k in keys)
    assert issuer.hits["/.well-known/jwks"] == 2


@pytest.mark.parametrize("failure", ["status", "bad_json", "empty_keys", "wrong_issuer", "foreign_jwks_uri", "huge_jwks"])
async def test_an_outage_keeps_the_last_good_keys(cache: KeyCache, issuer: OidcIssuer, clock: Any, failure: str) -> None:
    known = issuer.key("RS256").kid
    await cache.key_for(issuer.url, known)
    if failure == "status":
        issuer.outage.status = 500
    else:
        setattr(issuer.outage, failure, True)
    clock.advance(61)
    new = issuer.rotate("RS256")
    with pytest.raises(Unavailable) as refused:
        await cache.key_for(issuer.url, new.kid)
    assert refused.value.code == "jwks_unavailable" and refused.value.retry_after == 60
    assert (await cache.key_for(issuer.url, known)).algorithm_name == "RS256"  # still verifies
    assert cache.known_kids(issuer.url) == sorted(k.kid for k in issuer.keys[:2])


async def test_a_first_fetch_that_fails_answers_503(cache: KeyCache, issuer: OidcIssuer) -> None:
    issuer.outage.status = 503
    with pytest.raises(Unavailable) as refused:
        await cache.key_for(issuer.url, issuer.key("RS256").kid)
    assert refused.value.code == "jwks_unavailable"
    with pytest.raises(Unavailable):  # and the next one waits for the cooldown, without a fetch
        await cache.key_for(issuer.url, issuer.key("RS256").kid)
    assert issuer.hits["/.well-known/openid-configuration"] == 1


async def test_the_cooldown_holds_across_processes(hub: Any, issuer: OidcIssuer, clock: Any) -> None:
    """Two caches on one store stand for two gateway processes."""
    fetchers = [JsonFetcher(allow_insecure=True), JsonFetcher(allow_insecure=True)]
    first, second = (KeyCache(clock=clock, driver=hub.driver, fetcher=f) for f in fetchers)
    try:
        await first.key_for(issuer.url, issuer.key("RS256").kid)
        await second.key_for(issuer.url, issuer.key("RS256").kid)  # a process with no keys makes its first fetch
        clock.advance(61)
        new = issuer.rotate("RS256")
        await first.key_for(issuer.url, new.kid)
        jwks_fetches = issuer.hits["/.well-known/jwks"]
        with pytest.raises(Unavailable) as refused:
            await second.key_for(issuer.url, new.kid)
        assert refused.value.code == "jwks_unavailable" and 1 <= refused.value.retry_after <= 60
        assert issuer.hits["/.well-known/jwks"] == jwks_fetches
        clock.advance(61)
        assert (await second.key_for(issuer.url, new.kid)).algorithm_name == "RS256"
    finally:
        for fetcher in fetchers:
            await fetcher.close()


async def test_a_key_withdrawn_by_the_issuer_stops_verifying_within_an_hour(
    cache: KeyCache, issuer: OidcIssuer, clock: Any
) -> None:
    old = issuer.key("RS256").kid
    await cache.key_for(issuer.url, old)
    issuer.rotate("RS256", drop_old=True)
    clock.advance(3601)
    with pytest.raises(Unauthorized) as refused:
        await cache.key_for(issuer.url, old)
    assert refused.value.code == "unknown_kid"


def test_only_rs256_and_es256_signing_keys_are_kept() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm
    import json

    def jwk(public: Any, algorithm: Any, **extra: Any) -> dict[str, Any]:
        out = json.loads(algorithm.to_jwk(public))
        out.update(extra)
        return out

    rsa_public = pooled_key("RS256").public_key()
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    document = {"keys": [
        jwk(rsa_public, RSAAlgorithm, kid="good-rsa"),
        jwk(pooled_key("ES256").public_key(), ECAlgorithm, kid="good-ec", alg="ES256"),
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        jwk(small, RSAAlgorithm, kid="small-rsa"),
        jwk(p384, ECAlgorithm, kid="p384"),
        jwk(rsa_public, RSAAlgorithm, kid="encryption", use="enc"),
        jwk(rsa_public, RSAAlgorithm, kid="ps256", alg="PS256"),
        jwk(rsa_public, RSAAlgorithm),  # no kid
        "not a key",
    ]}
    assert sorted(parse_jwks(document)) == ["good-ec", "good-rsa"]
    assert parse_jwks({"keys": "nope"}) == {}


@pytest.mark.parametrize("url,insecure,allowed", [
    ("https://token.actions.githubusercontent.com", False, True),
    ("http://token.actions.githubusercontent.com", True, False),
    ("http://127.0.0.1:8080", False, False),
    ("http://127.0.0.1:8080", True, True),
    ("http://[::1]:8080", True, True),
    ("http://localhost:8080", True, True),
    ("http://10.0.0.1", True, False),
    ("https://user:pw@ci.example.com", False, False),
    ("ftp://ci.example.com", True, False),
])
def test_only_https_or_loopback_in_test_mode_is_contacted(url: str, insecure: bool, allowed: bool) -> None:
    assert url_allowed(url, insecure) is allowed


async def test_the_fetcher_refuses_plain_http_when_insecure_issuers_are_off(issuer: OidcIssuer) -> None:
    from gateway.ci.oidc.fetch import FetchError

    fetcher = JsonFetcher(allow_insecure=False)
    with pytest.raises(FetchError):
        await fetcher.get_json(issuer.url + "/.well-known/jwks")
    await fetcher.close()
    assert issuer.fetches == 0


@pytest.mark.parametrize("mode", ["drip_body", "drip_headers", "silent", "huge_slow"])
async def test_one_deadline_holds_the_whole_fetch(issuer: OidcIssuer, mode: str) -> None:
    """Each read of a dripping answer comes well inside a per-read timeout;
    only a deadline on the whole fetch (connect, headers, body) ends it."""
    import time

    from gateway.ci.oidc.fetch import FetchError
    from tests.support.drip_server import JWKS, DripIssuer

    fetcher = JsonFetcher(allow_insecure=True, timeout=0.3)
    async with DripIssuer(keys_from=issuer, modes={JWKS: mode}, interval=0.1) as drip:
        started = time.monotonic()
        with pytest.raises(FetchError):
            await fetcher.get_json(drip.url + JWKS)
        assert time.monotonic() - started < 1.0
        assert (await fetcher.get_json(drip.url + "/.well-known/openid-configuration"))["issuer"] == drip.url
    await fetcher.close()


def test_a_jwks_uri_urllib_cannot_read_is_refused_not_raised() -> None:
    """The discovery document, the issuer's own, names the jwks_uri: a port
    past 65535 or an unclosed IPv6 bracket is a refused URL (503 to the CI
    job), never a ValueError out of the key refresh."""
    from gateway.ci.oidc.fetch import url_allowed

    assert url_allowed("https://issuer.example/keys", False)
    for url in ("https://issuer.example:99999/keys", "https://[issuer/keys", "https://issuer.example:port/keys"):
        assert not url_allowed(url, False), url
