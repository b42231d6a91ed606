"""Signing keys of each OIDC issuer: discovered, parsed once, cached.

Per issuer the cache holds a `kid -> PyJWK` map, built once per fetch, so a
token costs one dictionary look-up to find its key.  The rules:

- Discovery (`ISSUER/.well-known/openid-configuration`) must name exactly
  this issuer, and its `jwks_uri` must be on the issuer's own origin.
- Only RSA (2048 bits or more, RS256) and P-256 (ES256) signing keys are
  kept; anything else in a JWKS (symmetric `oct` keys above all) is dropped.
- An unknown `kid` triggers at most one refresh per issuer per 60 s.  The
  slot is taken in the store (`jwks_refreshes`), so the limit holds for all
  gateway processes together; a process with no keys yet may always make its
  first fetch.  Concurrent misses wait for the one refresh in flight.
- One refresh (discovery and JWKS together) has the fetch deadline (5 s):
  the request that makes it, and every request waiting on the lock behind
  it, has its answer within about that time however slowly the issuer sends.
- A failed refresh keeps the last good keys.  A kid that cannot be had (the
  slot is taken, or the issuer is down) answers 503 `jwks_unavailable` with
  Retry-After, so a CI job retries; a kid absent from a fresh key set is 401
  `unknown_kid`.
- A key set older than an hour is refreshed on next use when the slot is
  free, so a key the issuer withdrew stops verifying.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from jwt import PyJWK
from jwt.exceptions import PyJWKError

from gateway.core.clock import Clock
from gateway.core.errors import Unauthorized, Unavailable
from gateway.ci.oidc.fetch import FetchError, JsonFetcher, same_origin, url_allowed

log = logging.getLogger("relayroom.oidc")

REFRESH_COOLDOWN = 60.0
MAX_KEY_AGE = 3600.0
MIN_RSA_BITS = 2048
MAX_KID = 256


def parse_jwks(document: dict[str, Any]) -> dict[str, PyJWK]:
    """kid -> key for the usable signing keys of a JWKS document."""
    keys: dict[str, PyJWK] = {}
    items = document.get("keys")
    if not isinstance(items, list):
        return keys
    for item in items[:100]:
        if not isinstance(item, dict):
            continue
        kid = item.get("kid")
        if not isinstance(kid, str) or not 0 < len(kid) <= MAX_KID or kid in keys:
            continue
        if item.get("use", "sig") != "sig":
            continue
        kty, alg = item.get("kty"), item.get("alg")
        if kty == "RSA" and alg in (None, "RS256"):
            algorithm = "RS256"
        elif kty == "EC" and item.get("crv") == "P-256" and alg in (None, "ES256"):
            algorithm = "ES256"
        else:
            continue  # never an `oct` (HMAC) key, never an algorithm off the allow-list
        try:
            key = PyJWK(item, algorithm=algorithm)
        except (PyJWKError, ValueError, TypeError):
            continue
        if algorithm == "RS256" and getattr(key.key, "key_size", 0) < MIN_RSA_BITS:
            continue
        keys[kid] = key
    return keys


@dataclass
class _IssuerKeys:
    keys: dict[str, PyJWK] = field(default_factory=dict)
    fetched_at: float | None = None  # last successful refresh
    attempted_at: float | None = None  # last refresh attempt by this process
    attempts: int = 0  # refresh attempts so far: tells a waiter whether one ran while it waited
    last_ok: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class KeyCache:
    def __init__(
        self,
        *,
        clock: Clock,
        driver: Any,
        fetcher: JsonFetcher,
        metrics: Any = None,
        cooldown: float = REFRESH_COOLDOWN,
        max_age: float = MAX_KEY_AGE,
    ) -> None:
        self.clock = clock
        self.driver = driver
        self.fetcher = fetcher
        self.metrics = metrics
        self.cooldown = cooldown
        self.max_age = max_age
        self._issuers: dict[str, _IssuerKeys] = {}

    def known_kids(self, issuer: str) -> list[str]:
        state = self._issuers.get(issuer)
        return sorted(state.keys) if state else []

    async def key_for(self, issuer: str, kid: str) -> PyJWK:
        state = self._issuers.get(issuer)
        if state is None:
            state = self._issuers[issuer] = _IssuerKeys()
        key = state.keys.get(kid)
        now = self.clock.now()
        if key is not None and (state.fetched_at is None or now - state.fetched_at < self.max_age):
            return key
        attempts_before = state.attempts
        async with state.lock:
            now = self.clock.now()
            if state.attempts != attempts_before:
                # A refresh ran while this request waited for it: its answer is ours.
                if kid in state.keys:
                    return state.keys[kid]
                if state.last_ok:
                    raise self._unknown_kid(issuer, kid)
                raise self._unavailable(issuer, kid, _seconds(self.cooldown))
            if key is not None:
                # Stale but known: refresh if the slot is free, else keep using it.
                if await self._take_slot(issuer, state, now) is None:
                    await self._refresh(issuer, state, now)
                current = state.keys.get(kid)
                if current is None:
                    raise self._unknown_kid(issuer, kid)
                return current
            wait = await self._take_slot(issuer, state, now)
            if wait is not None:
                raise self._unavailable(issuer, kid, wait)
            if not await self._refresh(issuer, state, now):
                raise Unavailable(
                    f"the signing keys of {issuer} could not be fetched; retry in {int(self.cooldown)} s",
                    code="jwks_unavailable",
                    retry_after=int(self.cooldown),
                )
            found = state.keys.get(kid)
            if found is None:
                raise self._unknown_kid(issuer, kid)
            return found

    def _unavailable(self, issuer: str, kid: str, wait: int) -> Unavailable:
        return Unavailable(
            f"the signing key {_show(kid)} of {issuer} is not in the cached key set and the key set was "
            f"refreshed less than {int(self.cooldown)} s ago; retry in {wait} s",
            code="jwks_unavailable",
            retry_after=wait,
        )

    def _unknown_kid(self, issuer: str, kid: str) -> Unauthorized:
        return Unauthorized(
            f"no signing key {_show(kid)} in the current key set of {issuer}; the token was not signed by this issuer",
            code="unknown_kid",
        )

    async def _take_slot(self, issuer: str, state: _IssuerKeys, now: float) -> int | None:
        """None when this process may refresh now; else seconds to wait."""
        if state.attempted_at is not None and now - state.attempted_at < self.cooldown:
            return _seconds(state.attempted_at + self.cooldown - now)
        cooldown = self.cooldown
        claimed = await self.driver.write(lambda q: q.claim_jwks_refresh(issuer, now, cooldown))
        if claimed or not state.keys:
            # A process holding no keys yet makes its first fetch even when
            # another process refreshed a moment ago.
            return None
        other = await self.driver.read(lambda q: q.jwks_refreshed_at(issuer))
        # Remember the other process's refresh, so the next miss here asks the store no more.
        state.attempted_at = other if other is not None else now
        return _seconds(state.attempted_at + self.cooldown - now)

    async def _refresh(self, issuer: str, state: _IssuerKeys, now: float) -> bool:
        state.attempted_at = now
        try:
            # The deadline is the whole refresh's, not each fetch's: the
            # waiters on this issuer's lock wait no longer than it either.
            async with asyncio.timeout(self.fetcher.timeout):
                keys = await self._fetch(issuer)
        except TimeoutError:
            log.warning("JWKS refresh of %s took over %g s (keeping %d cached keys)", issuer, self.fetcher.timeout, len(state.keys))
            self._count("error")
            state.last_ok = False
            return False
        except FetchError as exc:
            log.warning("JWKS refresh of %s failed (keeping %d cached keys): %s", issuer, len(state.keys), exc)
            self._count("error")
            state.last_ok = False
            return False
        finally:
            # Counted once finished: a request that arrived while the fetch
            # was in flight must see "a refresh ran" and take its answer,
            # not find the cooldown started and answer 503.
            state.attempts += 1
        state.last_ok = True
        state.keys = keys
        state.fetched_at = now
        self._count("ok")
        log.info("JWKS of %s refreshed: %d keys", issuer, len(keys))
        return True

    async def _fetch(self, issuer: str) -> dict[str, PyJWK]:
        discovery = await self.fetcher.get_json(f"{issuer}/.well-known/openid-configuration")
        if discovery.get("issuer") != issuer:
            raise FetchError(f"the discovery document of {issuer} names another issuer")
        jwks_uri = discovery.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not url_allowed(jwks_uri, self.fetcher.allow_insecure):
            raise FetchError(f"the discovery document of {issuer} has no usable jwks_uri")
        if not same_origin(jwks_uri, issuer):
            raise FetchError(f"the jwks_uri of {issuer} is on another origin; refused")
        keys = parse_jwks(await self.fetcher.get_json(jwks_uri))
        if not keys:
            raise FetchError(f"the JWKS of {issuer} holds no usable RS256/ES256 signing key")
        return keys

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.jwks_fetches.labels(result).inc()


def _seconds(value: float) -> int:
    return max(1, math.ceil(value))


def _show(kid: str) -> str:
    return repr(kid if len(kid) <= 64 else kid[:61] + "...")
