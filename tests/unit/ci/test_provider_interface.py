"""A CI provider is one class in one module, listed in one table.

A made-up provider, written here in a few lines and registered for the test
only, meets every rule the shipped ones meet: check map validation, the
conflicts between maps (one repository, one project), the rule that an
issuer with immutable ids is never bound by `sub`, its own voting policy,
and the intake through the OIDC door.  And no code outside
`gateway/ci/providers/` names a provider.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.ci.checkmaps.conflicts import resolve
from gateway.ci.checkmaps.validate import validate_text
from gateway.ci.providers import PROVIDERS, Binding, RunFacts
from gateway.ci.providers.claims import Refusal, id_claim, str_claim
from gateway.ci.providers.fields import Fields
from gateway.ci.providers.issuers import issuer_location
from gateway.web.labels import issuer_label
from tests.support.attest_fixtures import checkmap, learn, write_map
from tests.support.attest_fixtures import issuer  # noqa: F401 (fixture)
from tests.support.helpers import snapshot
from tests.support.oidc_issuer import OidcIssuer

ROOT = Path(__file__).resolve().parents[3]
FORGE = "https://ci.forge.example"


@dataclass(frozen=True, kw_only=True)
class Forge(Binding):
    """A made-up CI system: bound by its immutable `repo_id`; only push runs vote."""

    NAME = "forge-ci"
    LABEL = "Forge CI"
    KEYS = frozenset({"issuer", "repo_id", "refs", "allow_events", "shared_with"})
    BINDS_BY = "ids"
    DEFAULT_ISSUER = FORGE
    ID_ISSUERS = (FORGE,)
    REQUIRED_CLAIMS = ("repo_id", "ref", "event")
    PROVENANCE_CLAIMS = ("repo_id", "ref", "event", "sha")

    repo_id: str

    @classmethod
    def read(cls, fields: Fields) -> dict[str, Any]:
        return {"repo_id": fields.numeric_id("repo_id", required=True)}

    def repository_key(self) -> str | None:
        return f"Forge repository {self.repo_id} on {issuer_location(self.issuer or FORGE)}"

    def identifies(self, claims: dict[str, Any]) -> bool:
        return id_claim(claims, "repo_id") == self.repo_id

    @classmethod
    def run_from_claims(cls, claims: dict[str, Any]) -> RunFacts:
        return replace(super().run_from_claims(claims), event=str_claim(claims, "event"))

    def refusal(self, run: RunFacts) -> Refusal | None:
        if run.event != "push" and run.event not in self.allow_events:
            return Refusal("event_not_allowed", "event", f"event: {run.event} runs cannot vote")
        return super().refusal(run)


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one registry line, for this test only."""
    monkeypatch.setitem(PROVIDERS, Forge.NAME, Forge)


def forge(issuer_url: str = FORGE, repo_id: str = "77", extra: str = "") -> str:
    return f"""
  - provider: forge-ci
    issuer: {issuer_url}
    repo_id: "{repo_id}"
    refs: [refs/heads/main]
{extra}"""


# -- validation -----------------------------------------------------------------------------


def test_a_map_binding_it_loads_as_its_class() -> None:
    parsed, problems = validate_text(checkmap("acme", forge(), {}), "acme.yaml")
    assert problems == [] and parsed is not None
    [binding] = parsed.bindings
    assert isinstance(binding, Forge) and binding.repo_id == "77" and binding.identity == "oidc:ci.forge.example:acme"


@pytest.mark.parametrize("item,message", [
    ('\n  - provider: forge-ci\n    refs: [refs/heads/main]\n', "repo_id is required"),
    ('\n  - provider: forge-ci\n    repo_id: 0123\n    refs: [refs/heads/main]\n', "repo_id must be quoted"),
    ('\n  - provider: forge-ci\n    repo_id: "77"\n', "refs is required"),
    ('\n  - provider: forge-ci\n    repo_id: "77"\n    refs: [main]\n    workflows: [ci.yml]\n',
     "unknown key workflows for provider forge-ci; allowed: allow_events, description, issuer, provider, refs,"),
    ('\n  - provider: forge-ci\n    repo_id: "77"\n    refs: [main]\n    secret: hunter2\n', "a secret must never"),
    ('\n  - provider: forge-ci\n    repo_id: "77"\n    refs: [main]\n    shared_with: [acme]\n',
     "this file's own project"),
])
def test_its_keys_are_validated_fail_closed(item: str, message: str) -> None:
    parsed, problems = validate_text(checkmap("acme", item, {}), "acme.yaml")
    assert parsed is None and any(message in p.message for p in problems), problems


def test_the_provider_list_in_messages_names_it() -> None:
    _, problems = validate_text(checkmap("acme", "\n  - provider: jenkins\n", {}), "acme.yaml")
    assert "forge-ci" in problems[0].message


# -- conflicts: one repository, one project; ids never bound by sub --------------------------------


def _map(name: str, project: str, bindings: str) -> Any:
    parsed, problems = validate_text(checkmap(project, bindings, {}), name)
    assert problems == [], problems
    return parsed


def test_one_repository_speaks_for_one_project_unless_both_consent() -> None:
    acme, beta = _map("acme.yaml", "acme", forge()), _map("beta.yaml", "beta", forge())
    decisions = resolve({"acme.yaml": (acme, acme), "beta.yaml": (None, beta)})
    assert decisions["acme.yaml"].keep is acme and decisions["beta.yaml"].keep is None
    assert "Forge repository 77 on ci.forge.example is already bound by project acme" in \
        decisions["beta.yaml"].problems[0].message
    acme = _map("acme.yaml", "acme", forge(extra="    shared_with: [beta]"))
    beta = _map("beta.yaml", "beta", forge(extra="    shared_with: [acme]"))
    decisions = resolve({"acme.yaml": (acme, acme), "beta.yaml": (None, beta)})
    assert decisions["beta.yaml"].keep is beta
    other = _map("gamma.yaml", "gamma", forge(repo_id="78"))
    assert resolve({"acme.yaml": (acme, acme), "gamma.yaml": (None, other)})["gamma.yaml"].keep is other


def test_its_issuers_are_never_bound_by_sub() -> None:
    by_sub = f'\n  - provider: oidc\n    issuer: {FORGE}\n    subject: "repo:acme/api"\n'
    parsed, problems = validate_text(checkmap("acme", by_sub, {}), "acme.yaml")
    assert parsed is None and "has immutable ids: bind it with provider: github-actions or gitlab or forge-ci" in \
        problems[0].message
    # A self-hosted instance is known by the binding of another file.
    hosted = "https://forge.internal.example"
    ids = _map("acme.yaml", "acme", forge(issuer_url=hosted))
    sub = _map("beta.yaml", "beta", f'\n  - provider: oidc\n    issuer: {hosted}\n    subject: "repo:beta"\n')
    decisions = resolve({"acme.yaml": (ids, ids), "beta.yaml": (sub, sub)})
    assert decisions["beta.yaml"].keep is None and "bound by its immutable ids in acme.yaml" in \
        decisions["beta.yaml"].problems[0].message


# -- voting and the intake, through the OIDC door --------------------------------------------------


def token(running: OidcIssuer, now: float, **claims: Any) -> str:
    base = {"iss": running.url, "aud": "relayroom", "jti": str(uuid.uuid4()), "iat": int(now) - 5,
            "exp": int(now) + 300, "sub": "forge:acme/api", "repo_id": "77", "ref": "refs/heads/main",
            "event": "push", "sha": "0f" * 20}
    base.update(claims)
    return running.mint(base)


async def test_its_runs_vote_by_its_policy_through_the_intake(client: httpx.AsyncClient, hub: Any, acme: Any,
                                                              checkmap_dir: Any, issuer: OidcIssuer) -> None:
    entry = await learn(hub, "acme", "Builds are reproducible.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", forge(issuer.url), {"build": [entry]}))
    now = hub.clock.now()

    async def attest(tok: str) -> httpx.Response:
        return await client.post("/v1/attestations", json={"check": "build", "outcome": "success"},
                                 headers={"Authorization": f"Bearer {tok}"})

    before = await snapshot(hub)
    for claims, status, code in (({"event": "pull_request"}, 403, "event_not_allowed"),
                                 ({"ref": "refs/heads/feature"}, 403, "binding_mismatch"),
                                 ({"repo_id": "78"}, 403, "binding_mismatch"),
                                 ({"repo_id": None}, 401, "missing_claim")):
        refused = await attest(token(issuer, now, **claims))
        assert refused.status_code == status and refused.json()["error"]["code"] == code, refused.text
    assert await snapshot(hub) == before
    ok = await attest(token(issuer, now))
    assert ok.status_code == 201, ok.text
    body = ok.json()
    assert body["issuer"] == f"oidc:{issuer.host}:acme" and body["counted"] is True
    assert body["supports"] == [{"entry_id": entry, "duplicate": False}]
    rows = await hub.driver.read(lambda q: q.tx.all("SELECT provenance FROM attestations"))
    provenance = json.loads(rows[0]["provenance"]) if isinstance(rows[0]["provenance"], str) else rows[0]["provenance"]
    assert provenance["provider"] == "forge-ci" and provenance["commit"] == "0f" * 20
    lifted = forge(issuer.url, extra="    allow_events: [pull_request]")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", lifted, {"build": [entry]}))
    assert (await attest(token(issuer, now, event="pull_request"))).status_code == 201


def test_the_pages_name_it_by_its_label() -> None:
    parsed = _map("acme.yaml", "acme", forge())
    assert issuer_label("oidc:ci.forge.example:acme", parsed.bindings) == "Forge CI"
    assert issuer_label("oidc:ci.forge.example:acme") == "Forge CI"


# -- no provider list outside the registry -------------------------------------------------------------


def test_no_code_outside_the_providers_names_a_provider() -> None:
    named = re.compile(r"""["'](github-actions|gitlab)["']|ID_ISSUER_HOSTS|OIDC_PROVIDERS|PROVIDER_NAMES""")
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             # ci_steps/ names the CI systems whose files it ships (`relayroom ci init gitlab`), not providers.
             for path in sorted((ROOT / "gateway").rglob("*.py")) if not {"providers", "ci_steps"} & set(path.parts)
             for number, line in enumerate(path.read_text().splitlines(), 1) if named.search(line)]
    assert found == []
