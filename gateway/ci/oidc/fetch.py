"""Bounded JSON fetches from OIDC issuers: discovery documents and JWKS.

Only `https://` URLs are ever contacted, unless insecure issuers are allowed
(tests, local development) and the host is a loopback address.  No redirect
is followed (it could lead to plain http or another host), and a response
over the size cap is abandoned unread.

One deadline (5 s) holds the whole of one fetch: connect, headers and body
together.  A per-read timeout alone lets an issuer that sends one byte every
few seconds hold the request (and every attestation waiting on its keys) for
as long as it likes.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.ci.providers.fields import is_loopback

log = logging.getLogger("relayroom.oidc")

TIMEOUT_SECONDS = 5.0
MAX_RESPONSE_BYTES = 256 * 1024


class FetchError(Exception):
    """The issuer could not give a usable answer; the message is for the log."""


@functools.lru_cache(maxsize=256)
def url_allowed(url: str, allow_insecure: bool) -> bool:
    try:  # an issuer's discovery document names this URL: a bad port or bracket must refuse, not raise
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number from 0 to 65535)
    except ValueError:
        return False
    if not parts.hostname or parts.username or parts.password:
        return False
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and allow_insecure and is_loopback(parts.hostname)


def same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, (pa.hostname or "").lower(), pa.port) == (pb.scheme, (pb.hostname or "").lower(), pb.port)


class JsonFetcher:
    """One pooled HTTP client per gateway process, created on first use."""

    def __init__(self, *, allow_insecure: bool, timeout: float = TIMEOUT_SECONDS, max_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.allow_insecure = allow_insecure
        self.timeout = timeout  # the deadline of one whole fetch, in seconds
        self.max_bytes = max_bytes
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
                headers={"Accept": "application/json", "User-Agent": "relayroom-gateway"},
                limits=httpx.Limits(max_connections=20, max_keepalive_connections=5),
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def get_json(self, url: str) -> dict[str, Any]:
        if not url_allowed(url, self.allow_insecure):
            raise FetchError(f"refusing to fetch {url}: only https:// (or loopback http in test mode) is contacted")
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._read(url)
        except TimeoutError:
            raise FetchError(f"{url} did not answer in full within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise FetchError(f"{url} could not be fetched: {type(exc).__name__}") from None
        try:
            document = json.loads(bytes(body))
        except (ValueError, RecursionError):
            raise FetchError(f"{url} did not answer JSON") from None
        if not isinstance(document, dict):
            raise FetchError(f"{url} did not answer a JSON object")
        return document

    async def _read(self, url: str) -> bytearray:
        async with self._http().stream("GET", url) as response:
            if response.status_code != 200:
                raise FetchError(f"{url} answered HTTP {response.status_code}")
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.max_bytes:
                raise FetchError(f"{url} answered more than {self.max_bytes} bytes")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > self.max_bytes:
                    raise FetchError(f"{url} answered more than {self.max_bytes} bytes")
            return body
