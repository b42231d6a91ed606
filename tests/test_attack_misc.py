"""Attacks of issue 11, findings 7, 9 and 10, tried as an attacker would.

- A dripping issuer: an issuer (anyone can run one a check map names, or sit
  on its path) that answers discovery or JWKS one byte at a time, drips its
  headers, never answers, or sends a huge body slowly.  Every attestation
  waiting on its keys answers 503 `jwks_unavailable` with Retry-After within
  about the fetch deadline, and nothing is recorded.
- Inputs that answered 500: cursors no listing handed out, settings out of
  the contract's ranges through every door, and a project whose stored
  settings are already out of range (an old database).
- Sessions that outlived sign-out: a copied cookie replayed after logout, a
  revoked owner token, forged and tampered cookies.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.attest_fixtures import checkmap, github_binding, learn, write_map
from tests.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.drip_server import DISCOVERY, JWKS, DripIssuer
from tests.helpers import snapshot
from tests.oidc_issuer import OidcIssuer

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])

DEADLINE = 0.4  # the fetch deadline these tests run with (5 s in service)
SLACK = 0.8  # the event loop, the store and the answer, on a busy CI machine


# -- a dripping issuer ------------------------------------------------------------------------


@pytest.fixture
async def drip(issuer: OidcIssuer) -> Any:
    async with DripIssuer(keys_from=issuer, interval=0.2) as running:
        yield running


async def _bind(hub: Any, checkmap_dir: Any, drip: DripIssuer) -> str:
    entry = await learn(hub, "acme", "Migrations run in staging first.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(drip.url), {"migrations": [entry]}))
    hub.extensions["oidc"].keys.fetcher.timeout = DEADLINE
    return entry


async def _attest(client: httpx.AsyncClient, token: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await client.post(
        "/v1/attestations", json={"check": "migrations", "outcome": "success"}, headers={"Authorization": f"Bearer {token}"}
    )
    return response, time.monotonic() - started


def _unavailable(response: httpx.Response, elapsed: float) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "jwks_unavailable"
    assert int(response.headers["retry-after"]) >= 1
    assert elapsed < DEADLINE + SLACK, f"held {elapsed:.2f} s by the issuer"


@sqlite_only
@pytest.mark.parametrize(
    "modes",
    [
        {DISCOVERY: "drip_body"},
        {DISCOVERY: "drip_headers"},
        {DISCOVERY: "silent"},
        {JWKS: "drip_body"},  # discovery answers at once, the key set drips
        {JWKS: "drip_headers"},
        {JWKS: "silent"},
        {JWKS: "huge_slow"},  # 400 KiB in 16 KiB chunks: the deadline ends it before the size cap does
    ],
    ids=lambda m: "+".join(f"{p.rsplit('/', 1)[1]}={v}" for p, v in m.items()),
)
async def test_a_dripping_issuer_holds_no_attestation_past_the_deadline(
    client: Any, hub: Any, acme: Any, checkmap_dir: Any, drip: DripIssuer, clock: Any, modes: dict[str, str]
) -> None:
    await _bind(hub, checkmap_dir, drip)
    drip.modes.update(modes)
    before = await snapshot(hub)
    # Two CI jobs at once: the second waits on the first one's refresh, no longer.
    (first, t1), (second, t2) = await asyncio.gather(
        _attest(client, drip.token(clock.now())), _attest(client, drip.token(clock.now()))
    )
    _unavailable(first, t1)
    _unavailable(second, t2)
    assert await snapshot(hub) == before


async def test_after_a_dripped_refresh_the_cooldown_answers_at_once_and_then_keys_work(
    client: Any, hub: Any, acme: Any, checkmap_dir: Any, drip: DripIssuer, clock: Any
) -> None:
    await _bind(hub, checkmap_dir, drip)
    drip.modes[JWKS] = "drip_body"
    before = await snapshot(hub)
    response, elapsed = await _attest(client, drip.token(clock.now()))
    _unavailable(response, elapsed)
    assert int(response.headers["retry-after"]) == 60
    hits = dict(drip.hits)
    response, elapsed = await _attest(client, drip.token(clock.now()))
    _unavailable(response, elapsed)
    assert elapsed < 0.3 and drip.hits == hits  # inside the cooldown: no fetch at all
    assert await snapshot(hub) == before
    # The issuer mends; after the cooldown the job's retry is counted.
    drip.modes.clear()
    clock.advance(61)
    response, _ = await _attest(client, drip.token(clock.now()))
    assert response.status_code == 201 and response.json()["counted"] is True


@sqlite_only
async def test_a_slow_but_honest_issuer_inside_the_deadline_is_served(
    client: Any, hub: Any, acme: Any, checkmap_dir: Any, drip: DripIssuer, clock: Any
) -> None:
    await _bind(hub, checkmap_dir, drip)
    hub.extensions["oidc"].keys.fetcher.timeout = 3.0
    drip.interval = 0.01
    drip.modes[DISCOVERY] = "drip_body"  # about 80 bytes, one per 10 ms: slow, well inside 3 s
    response, _ = await _attest(client, drip.token(clock.now()))
    assert response.status_code == 201, response.text
