"""POST /v1/attestations as CI uses it: the 5.1 answer, every provider, the
issuer identity of 5.2, project selection, and the metrics."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.attest_fixtures import checkmap, counts, github_binding, gitlab_binding, learn, write_map
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import make_project
from tests.support.oidc_issuer import OidcIssuer


async def post(client: httpx.AsyncClient, token: str, **body: Any) -> httpx.Response:
    body.setdefault("check", "migrations")
    body.setdefault("outcome", "success")
    return await client.post("/v1/attestations", json=body, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
async def acme_map(hub: Any, acme: Any, checkmap_dir: Any, issuer: OidcIssuer, gitlab_issuer: OidcIssuer) -> list[str]:
    ids = [await learn(hub, "acme", "Migrations run in staging first."), await learn(hub, "acme", "Tests beside files.")]
    text = checkmap("acme", github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url),
                    {"migrations": [ids[0]], "tests": [ids[0], ids[1]], "deploy": [ids[1]]},
                    {"deploy": "workflows: [.github/workflows/deploy.yml]"})
    await write_map(hub, checkmap_dir, "acme.yaml", text)
    return ids


async def test_the_answer_of_5_1(client: Any, acme_map: list[str], issuer: OidcIssuer, clock: Any) -> None:
    response = await post(client, issuer.github_token(clock.now()), check="tests", run_url="https://ci.example/run/1")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"attestation_id", "project", "issuer", "check", "counted", "supports", "promoted"}
    assert body["project"] == "acme" and body["check"] == "tests" and body["counted"] is True
    assert body["issuer"] == f"oidc:{issuer.host}:acme"
    assert body["supports"] == [{"entry_id": acme_map[0], "duplicate": False}, {"entry_id": acme_map[1], "duplicate": False}]
    assert body["promoted"] == []


@pytest.mark.parametrize("outcome", ["failure", "cancelled", "skipped"])
async def test_not_success_is_kept_without_a_vote(client: Any, hub: Any, acme_map: list[str], issuer: OidcIssuer,
                                                  clock: Any, outcome: str) -> None:
    before = await counts(hub)
    body = (await post(client, issuer.github_token(clock.now()), outcome=outcome)).json()
    assert body["counted"] is False and body["reason"] == "not_success" and body["supports"] == []
    after = await counts(hub)
    assert after["attestations"] == before["attestations"] + 1 and after["supports"] == before["supports"]


async def test_a_check_names_the_workflows_that_speak_for_it(client: Any, acme_map: list[str], issuer: OidcIssuer,
                                                             clock: Any) -> None:
    other = await post(client, issuer.github_token(clock.now()), check="deploy")
    assert other.json()["reason"] == "workflow_not_allowed"
    named = await post(client, issuer.github_token(clock.now(), workflow_path=".github/workflows/deploy.yml"), check="deploy")
    assert named.json()["counted"] is True and named.json()["supports"] == [{"entry_id": acme_map[1], "duplicate": False}]


async def test_gitlab_and_github_are_two_voices(client: Any, acme_map: list[str], issuer: OidcIssuer,
                                                gitlab_issuer: OidcIssuer, clock: Any, hub: Any) -> None:
    await post(client, issuer.github_token(clock.now()))
    body = (await post(client, gitlab_issuer.gitlab_token(clock.now()))).json()
    assert body["issuer"] == f"oidc:{gitlab_issuer.host}:acme" and body["promoted"] == [acme_map[0]]
    metrics = (await client.get("/metrics")).text
    assert 'relayroom_attestations_total{counted="true",outcome="success"} 2.0' in metrics
    assert 'relayroom_promotions_total{by="issuers"} 1.0' in metrics
    assert 'relayroom_jwks_fetches_total{result="ok"} 2.0' in metrics
    audit = [row["action"] for row in await hub.driver.read(lambda q: q.audit_rows(1, entry_id=acme_map[0]))]
    assert audit[:3] == ["promote", "support", "support"]


async def test_a_generic_issuer_is_bound_by_its_exact_subject(client: Any, hub: Any, acme: Any, checkmap_dir: Any,
                                                              issuer: OidcIssuer, clock: Any) -> None:
    entry = await learn(hub, "acme", "Builds are reproducible.")
    await write_map(hub, checkmap_dir, "acme.yaml", f"""project: acme
issuers:
  - provider: oidc
    issuer: {issuer.url}
    subject: "pipeline:acme/api:main"
checks:
  build:
    supports: [{entry}]
""")
    token = issuer.mint({"iss": issuer.url, "aud": "relayroom", "sub": "pipeline:acme/api:main", "jti": "j-1",
                         "iat": int(clock.now()), "exp": int(clock.now()) + 300})
    ok = await post(client, token, check="build")
    assert ok.status_code == 201 and ok.json()["issuer"] == f"oidc:{issuer.host}:acme"
    wrong = issuer.mint({"iss": issuer.url, "aud": "relayroom", "sub": "pipeline:acme/api:feature", "jti": "j-2",
                         "iat": int(clock.now()), "exp": int(clock.now()) + 300})
    refused = await post(client, wrong, check="build")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "binding_mismatch"
    assert "pipeline:acme/api:feature" in refused.json()["error"]["message"]


async def test_a_repository_shared_by_two_projects_needs_the_body_to_pick(
    client: Any, hub: Any, checkmap_dir: Any, issuer: OidcIssuer, clock: Any
) -> None:
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url, extra="    shared_with: [beta]"), {}))
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", github_binding(issuer.url, extra="    shared_with: [acme]"), {}))
    ambiguous = await post(client, issuer.github_token(clock.now()))
    assert ambiguous.status_code == 422 and ambiguous.json()["error"]["code"] == "project_required"
    picked = await post(client, issuer.github_token(clock.now()), project="beta")
    assert picked.status_code == 201 and picked.json()["issuer"] == f"oidc:{issuer.host}:beta"


async def test_a_map_for_a_project_that_does_not_exist_is_refused_cleanly(
    client: Any, hub: Any, checkmap_dir: Any, issuer: OidcIssuer, clock: Any
) -> None:
    await write_map(hub, checkmap_dir, "ghost.yaml", checkmap("ghost", github_binding(issuer.url), {}))
    response = await post(client, issuer.github_token(clock.now()))
    assert response.status_code == 404 and response.json()["error"]["code"] == "project_not_found"
    assert await counts(hub) == {"attestations": 0, "supports": 0, "seen_tokens": 0, "webhook_deliveries": 0, "audit": 0}


async def test_an_id_of_another_project_is_never_supported(
    client: Any, hub: Any, checkmap_dir: Any, issuer: OidcIssuer, clock: Any
) -> None:
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    foreign = await learn(hub, "beta", "Beta's own entry.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url), {"migrations": [foreign]}))
    body = (await post(client, issuer.github_token(clock.now()))).json()
    assert body["counted"] is True and body["supports"] == [] and body["promoted"] == []
    assert (await counts(hub))["supports"] == 0


async def test_allow_events_lifts_pull_request_target(client: Any, hub: Any, acme: Any, checkmap_dir: Any,
                                                      issuer: OidcIssuer, clock: Any) -> None:
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap(
        "acme", github_binding(issuer.url, extra="    allow_events: [pull_request_target]"), {}))
    response = await post(client, issuer.github_token(clock.now(), event_name="pull_request_target"))
    assert response.status_code == 201


async def test_a_github_enterprise_server_is_another_ci_system(client: Any, hub: Any, acme: Any, checkmap_dir: Any,
                                                               clock: Any) -> None:
    with OidcIssuer() as ghe:
        await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(ghe.url), {}))
        body = (await post(client, ghe.github_token(clock.now()))).json()
        assert body["issuer"] == f"oidc:{ghe.host}:acme" != "oidc:token.actions.githubusercontent.com:acme"


async def test_a_plain_http_issuer_is_not_contacted_without_the_test_switch(hub: Any, acme: Any, checkmap_dir: Any,
                                                                          issuer: OidcIssuer, clock: Any) -> None:
    from dataclasses import replace

    from gateway.web.app import build_app

    hub.config = replace(hub.config, allow_insecure_issuers=False)
    hub.verifier.allow_insecure = hub.fetcher.allow_insecure = False  # as a hub built from this config has them
    app = build_app(hub, manage_hub=False)
    async with app.state.session_manager.run():
        await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url), {}))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            response = await post(client, issuer.github_token(clock.now()))
    assert response.status_code == 401 and response.json()["error"]["code"] == "unknown_issuer"
    assert "RELAYROOM_ALLOW_INSECURE_ISSUERS" in response.json()["error"]["message"]
    assert issuer.fetches == 0


async def test_replays_hold_across_a_restart(config: Any, clock: Any, checkmap_dir: Any, issuer: OidcIssuer) -> None:
    """The jti reservation is in the store: a second gateway on the same
    database (a restart, or another process) refuses the replay."""
    from gateway.hub import Hub
    from gateway.web.app import build_app

    token = issuer.github_token(clock.now())
    answers = []
    for attempt in range(2):
        hub = Hub(config, clock=clock)
        await hub.start(background=False)
        try:
            if attempt == 0:
                await make_project(hub, "acme")
                (checkmap_dir / "acme.yaml").write_text(checkmap("acme", github_binding(issuer.url), {}))
            app = build_app(hub, manage_hub=False)
            await hub.checkmaps.refresh(hub.driver)
            async with app.state.session_manager.run():
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                    answers.append((await post(client, token)).status_code)
        finally:
            await hub.stop()
    assert answers == [201, 409]
