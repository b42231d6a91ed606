"""Hypothesis at the CI side: check map YAML, and JWT headers and payloads.

Check maps: any text, and mutated check maps (keys renamed, values of the
wrong type, secrets slipped in, providers mixed up) go through the validator.
It never raises; it returns a map with no problem or problems with a line,
never both; and what it accepts is fail-closed (every CI binding pinned to an
id and to refs, no secret anywhere in the file).

Tokens: GitHub-shaped OIDC tokens with mutated headers (algorithms off the
list, foreign `jku`/`x5u`/`jwk`, odd kids) and payloads (claims dropped,
retyped, moved in time, other audiences and issuers), signed by the issuer,
by an attacker or not at all, go to `POST /v1/attestations` on a real server.
Never a 5xx other than the contract's 503 `jwks_unavailable`; every refusal
in the contract's body; an attestation is recorded only for a token the
contract says to accept; the attacker's URLs are never fetched.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import hypothesis
import jwt
import pytest
import yaml
from hypothesis import HealthCheck, Phase, example, given
from hypothesis import strategies as st

from gateway.ci.checkmaps.validate import SECRET_KEYS, validate_text
from gateway.ci.providers import PROVIDERS
from gateway.core.clock import SystemClock
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.web.app import build_app
from tests.support.attest_fixtures import checkmap, github_binding, learn as learn_direct, write_map
from tests.conftest import LiveServer, make_project
from tests.support.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.slow

SETTINGS = dict(
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)

# -- check map YAML ------------------------------------------------------------------------

ALL_BINDING_KEYS = sorted(set().union(*(cls.keys() for cls in PROVIDERS.values())))
yaml_scalars = (
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=30) | st.sampled_from(["refs/heads/main", "*", "123456", "kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ", "whsec_QUJD", "", "~"])
)
yaml_values = st.recursive(yaml_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


@st.composite
def bindings(draw: st.DrawFn) -> dict[str, Any]:
    provider = draw(st.sampled_from([*PROVIDERS, "github", "jenkins", 7]))
    keys = draw(st.lists(st.sampled_from([*ALL_BINDING_KEYS, *sorted(SECRET_KEYS), "ref", "repo"]), max_size=8, unique=True))
    item: dict[str, Any] = {"provider": provider}
    for key in keys:
        item[key] = draw(yaml_values | st.sampled_from(
            ["https://token.actions.githubusercontent.com", "http://127.0.0.1:9", "123456", ["refs/heads/main"], ["*"], []]
        ))
    return item


@st.composite
def check_maps(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        data["project"] = draw(st.sampled_from(["acme", "Acme", "-x", "a" * 64, ""]) | yaml_scalars)
    if draw(st.integers(0, 9)):
        data["issuers"] = draw(st.lists(bindings(), max_size=3) | yaml_values)
    if draw(st.integers(0, 9)):
        data["checks"] = draw(st.dictionaries(
            st.text(max_size=12) | st.sampled_from(["unit", "x" * 201]),
            st.fixed_dictionaries({"supports": st.lists(st.sampled_from(["kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ", "kn_01JD9A2B3C4D5E6F7G8H9J0K1M", "kn_01JD8"]) | yaml_scalars, max_size=3)},
                                  optional={"workflows": yaml_values, "secret": yaml_scalars, "extra": yaml_values}) | yaml_values,
            max_size=3,
        ))
    data.update(draw(st.dictionaries(st.sampled_from(["description", "secret", "token", "projects", "version"]), yaml_values, max_size=2)))
    return data


def _has_secret(value: Any) -> bool:
    if isinstance(value, dict):
        return any((isinstance(k, str) and k.lower() in SECRET_KEYS) or _has_secret(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_secret(v) for v in value)
    return isinstance(value, str) and value.startswith("whsec_")


def assert_validated(text: str | bytes, data: Any = None) -> None:
    result, problems = validate_text(text, "fuzz.yaml")  # never raises
    assert (result is None) == bool(problems), "a map comes with no problem, or problems with no map"
    lines = (text if isinstance(text, str) else text.decode("utf-8", "replace")).count("\n") + 2
    for problem in problems:
        assert problem.file == "fuzz.yaml" and 1 <= problem.line <= lines and problem.message
    if result is None:
        return
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", result.project)
    assert result.bindings, "no binding, no vote: an empty map is refused"
    for binding in result.bindings:
        if binding.OIDC:
            assert binding.issuer and binding.repository_key(), "an OIDC binding names the repository it lets speak"
        if binding.REFS_REQUIRED:
            assert binding.refs, "a CI binding lists the refs whose runs may vote"
    if data is not None:
        assert not _has_secret(data), "a check map holding a secret is refused"


@given(data=check_maps())
@example(data={"project": "acme", "issuers": [{"provider": "github-actions", "repository_id": "1", "repository_owner_id": "2",
                                               "refs": ["refs/heads/main"]}], "checks": {"unit": {"supports": ["kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ"]}}})
@example(data={"project": "acme", "issuers": [{"provider": "webhook", "source": "canary", "secret": "s3cret"}], "checks": {}})
@hypothesis.settings(max_examples=300, **SETTINGS)
def test_any_check_map_is_validated_fail_closed(data: dict[str, Any]) -> None:
    assert_validated(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), data)


@given(text=st.text(max_size=400) | st.binary(max_size=400).map(bytes))
@example(text="project: acme\na: &a [x, x]\nb: [*a, *a]\n")
@example(text="!!python/object/apply:os.system ['true']\n")
@example(text="project: !!binary aGVsbG8=\n")
@example(text=b"\xff\xfe project: acme")
@example(text="\t- ]: {")
@hypothesis.settings(max_examples=300, **SETTINGS)
def test_any_text_is_validated_without_raising(text: str | bytes) -> None:
    assert_validated(text)


@pytest.mark.parametrize("depth", [200, 600, 20_000])
def test_deeply_nested_yaml_is_a_problem_not_a_crash(depth: int) -> None:
    assert_validated("project: acme\nx: " + "[" * depth + "]" * depth + "\n")
    assert_validated("project: acme\nx: " + "{a: " * depth + "1" + "}" * depth + "\n")


# -- JWT headers and payloads ------------------------------------------------------------------


class CiGateway:
    def __init__(self, server: LiveServer, hub: Hub, issuer: OidcIssuer, attacker: OidcIssuer) -> None:
        self.server, self.hub, self.issuer, self.attacker = server, hub, issuer, attacker

    def attestations(self) -> int:
        assert self.hub.loop is not None
        coro = self.hub.driver.read(lambda q: q.count_rows("attestations"))
        return asyncio.run_coroutine_threadsafe(coro, self.hub.loop).result(30)


@pytest.fixture(scope="module")
def ci_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CiGateway]:
    folder: Path = tmp_path_factory.mktemp("fuzz_ci")
    (folder / "checkmaps").mkdir()
    config = Config.from_env({}, database_url=f"sqlite:///{folder / 'relayroom.db'}", checkmaps=str(folder / "checkmaps"),
                             allow_insecure_issuers=True, sweep_interval=0.0)
    hub = Hub(config, clock=SystemClock())
    with OidcIssuer() as issuer, OidcIssuer() as attacker, LiveServer(build_app(hub)) as server:
        async def prepare(hub: Hub) -> None:
            await make_project(hub, "acme")
            entry_id = await learn_direct(hub, "acme", "Fuzzed tokens never vote.")
            await write_map(hub, folder / "checkmaps", "acme.yaml", checkmap("acme", github_binding(issuer.url), {"unit": [entry_id]}))

        assert hub.loop is not None
        asyncio.run_coroutine_threadsafe(prepare(hub), hub.loop).result(30)
        yield CiGateway(server, hub, issuer, attacker)


CLAIMS = ["iss", "aud", "exp", "nbf", "iat", "jti", "sub", "ref", "repository_id", "repository_owner_id",
          "event_name", "job_workflow_ref", "ref_type"]
junk = st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=20) | st.lists(st.text(max_size=5), max_size=2)


def _segment(value: Any) -> str:
    # allow_nan: NaN and the infinities go out as bare words, hostile and not JSON
    return base64.urlsafe_b64encode(json.dumps(value, default=str, allow_nan=True).encode()).rstrip(b"=").decode()


def sign(header: dict[str, Any], claims: dict[str, Any], private: Any, alg: str) -> str:
    """A JWS over whatever claims were drawn (PyJWT's encode would refuse the
    odd ones before signing them)."""
    signing_input = f"{_segment(header)}.{_segment(claims)}"
    algorithm = jwt.get_algorithm_by_name(alg)
    signature = algorithm.sign(signing_input.encode(), private)
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


@st.composite
def tokens(draw: st.DrawFn, gw: CiGateway) -> tuple[str, dict[str, Any], dict[str, Any], str]:
    now = time.time()
    claims = gw.issuer.github_claims(now)
    for claim in draw(st.lists(st.sampled_from(CLAIMS), max_size=3, unique=True)):
        how = draw(st.sampled_from(["drop", "junk", "variant"]))
        if how == "drop":
            claims.pop(claim, None)
        elif how == "junk":
            claims[claim] = draw(junk)
        else:
            claims[claim] = draw(st.sampled_from({
                "iss": [gw.attacker.url, gw.issuer.url + "/", gw.issuer.url.replace("http:", "https:")],
                "aud": [["relayroom"], ["relayroom", "vault"], "https://github.com/acme", []],
                "exp": [int(now) - 61, int(now) - 30, int(now) + 10**9, float("inf")],
                "nbf": [int(now) + 61, int(now) + 30],
                "iat": [int(now) + 61, int(now) + 30],
                "jti": ["fixed-jti", ""],
                "ref": ["refs/heads/feature", "refs/tags/main"],
                "repository_id": ["654321", 123456],
                "repository_owner_id": ["1111"],
                "event_name": ["pull_request_target", "pull_request", "workflow_run", "issue_comment", "schedule",
                               "workflow_dispatch"],
                "ref_type": ["tag", "", "branch"],
            }.get(claim, ["x"])))
    key = gw.issuer.key(draw(st.sampled_from(["RS256", "ES256"])))
    header: dict[str, Any] = {"kid": key.kid, "typ": "JWT"}
    for name in draw(st.lists(st.sampled_from(["kid", "jku", "x5u", "jwk", "x5c", "crit", "typ"]), max_size=2, unique=True)):
        header[name] = draw(st.sampled_from({
            "kid": ["unknown-kid", "../../etc/passwd", "k" * 300, 7, None],
            "jku": [gw.attacker.url + "/.well-known/jwks"],
            "x5u": [gw.attacker.url + "/cert.pem"],
            "jwk": [gw.attacker.keys[0].public_jwk()],
            "x5c": [["MIIB"]],
            "crit": [["exp"], ["b64"]],
            "typ": ["at+jwt", 5],
        }[name]))
    signer = draw(st.sampled_from(["issuer", "issuer", "issuer", "attacker", "none", "hs256", "garbage"]))
    if signer in ("issuer", "attacker"):
        private = key.private if signer == "issuer" else gw.attacker.key(key.alg).private
        token = sign({**header, "alg": key.alg}, claims, private, key.alg)
    else:
        alg = {"none": "none", "hs256": "HS256", "garbage": key.alg}[signer]
        head, body = _segment({**header, "alg": alg}), _segment(claims)
        signature = "" if signer == "none" else _segment(draw(st.text(max_size=30)))
        token = f"{head}.{body}.{signature}"
    return token, header, claims, signer


def contract_accepts(gw: CiGateway, header: dict[str, Any], claims: dict[str, Any], signer: str, now: float) -> bool:
    """What the contract says about a token the fuzz made (a necessary
    condition for 201, not a full re-implementation of the verifier)."""
    if signer != "issuer" or header.get("kid") not in {k.kid for k in gw.issuer.keys}:
        return False
    if "crit" in header:  # RFC 7515: an extension the verifier does not understand is refused
        return False

    def moment(name: str, required: bool) -> float | None:
        value = claims.get(name)
        if value is None:
            return None if not required else float("nan")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return float("nan")
        return float(value)

    exp, nbf, iat = moment("exp", True), moment("nbf", False), moment("iat", False)
    aud = claims.get("aud")
    return (
        claims.get("iss") == gw.issuer.url
        and (aud == "relayroom" or aud == ["relayroom"])
        and str(claims.get("repository_id")) == "123456"
        and str(claims.get("repository_owner_id")) == "7890"
        and claims.get("ref") == "refs/heads/main"
        and claims.get("event_name") in ("push", "schedule", "workflow_dispatch")  # docs/ci-attestations.md, which runs vote
        and claims.get("ref_type") == "branch"
        and exp is not None and exp > now - 61  # NaN compares false
        and (nbf is None or nbf <= now + 61)
        and (iat is None or iat <= now + 61)
        and isinstance(claims.get("jti"), str) and claims["jti"] != ""
    )


def test_any_token_header_and_payload(ci_gateway: CiGateway) -> None:
    gw = ci_gateway
    accepted = 0
    before = gw.attestations()
    outcomes: dict[str, int] = {}
    client = httpx.Client(base_url=gw.server.url, timeout=20)

    @given(made=tokens(gw))
    @hypothesis.settings(max_examples=250, **SETTINGS)
    def run(made: tuple[str, dict[str, Any], dict[str, Any], str]) -> None:
        nonlocal accepted
        token, header, claims, signer = made
        now = time.time()
        r = client.post("/v1/attestations", json={"check": "unit", "outcome": "success"},
                        headers={"Authorization": f"Bearer {token}"})
        where = f"{signer} {header} {sorted(claims.items())[:6]} -> {r.status_code} {r.text[:200]}"
        assert r.status_code in (201, 400, 401, 403, 409, 413, 422, 431, 503), where
        if r.status_code == 201:
            assert contract_accepts(gw, header, claims, signer, now), f"accepted a token the contract refuses: {where}"
            accepted += 1
            outcomes["201"] = outcomes.get("201", 0) + 1
            return
        error = r.json()["error"]
        assert re.fullmatch(r"[a-z][a-z0-9_]*", error["code"]) and error["message"], where
        if r.status_code == 503:
            assert error["code"] == "jwks_unavailable" and int(r.headers["retry-after"]) >= 1, where
        outcomes[error["code"]] = outcomes.get(error["code"], 0) + 1

    try:
        run()
    finally:
        client.close()
    print(dict(sorted(outcomes.items())))
    assert accepted >= 5, "the fuzz reached the accepting path"
    assert len(outcomes) >= 8, outcomes
    assert gw.attestations() - before == accepted  # a refused token records nothing
    assert gw.attacker.fetches == 0, f"the attacker's URLs were fetched: {gw.attacker.hits}"
