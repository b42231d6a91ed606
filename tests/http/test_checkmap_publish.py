"""Check maps published by the repository's own CI (contract 5.6).

The folder binds the repository once (an operator's act); after that the
repository's CI publishes the map: a change of checks is in force at once,
a change of who may vote waits for the owner, who approves or rejects it by
its sha256.  Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.config import Config
from gateway.hub import Hub
from tests.conftest import ProjectTokens, make_project
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding, learn, write_map
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.support.helpers import bearer, snapshot
from tests.support.oidc_issuer import OidcIssuer

PATH = "checkmaps/acme.yaml"


class Repo:
    """The acme repository as its CI sees it: a map file, tokens of its runs."""

    def __init__(self, hub: Hub, client: httpx.AsyncClient, github: OidcIssuer, gitlab: OidcIssuer,
                 entries: dict[str, str]) -> None:
        self.hub, self.client, self.github, self.gitlab, self.entries = hub, client, github, gitlab, entries

    def text(self, *, checks: dict[str, list[str]] | None = None, github_refs: str = "[refs/heads/main]",
             github: bool = True, gitlab: bool = True, extra: str = "") -> str:
        bindings = (github_binding(self.github.url, refs=github_refs) if github else "") + (
            gitlab_binding(self.gitlab.url) if gitlab else "") + extra
        return checkmap("acme", bindings, checks if checks is not None else {"migrations": [self.entries["migrations"]]})

    def token(self, **claims: Any) -> str:
        return self.github.github_token(self.hub.clock.now(), **claims)

    def gitlab_token(self, **claims: Any) -> str:
        return self.gitlab.gitlab_token(self.hub.clock.now(), **claims)

    async def publish(self, text: str, token: str | None = None, **body: Any) -> httpx.Response:
        """With a fresh token of a push to main unless `token` says otherwise ("": none at all)."""
        payload = {"project": "acme", "path": PATH, "content": text, **body}
        headers = bearer(self.token() if token is None else token) if token != "" else {}
        return await self.client.post("/v1/checkmaps", json=payload, headers=headers)

    async def attest(self, check: str, token: str | None = None) -> httpx.Response:
        return await self.client.post("/v1/attestations", json={"check": check, "outcome": "success"},
                                      headers=bearer(token or self.token()))

    def in_force(self) -> str:
        return self.hub.checkmaps.snapshot.maps["acme"].sha256


@pytest.fixture
async def repo(hub: Hub, client: httpx.AsyncClient, checkmap_dir: Path, issuer: OidcIssuer,  # noqa: F811
               gitlab_issuer: OidcIssuer, acme: ProjectTokens) -> Repo:  # noqa: F811
    entries = {"migrations": await learn(hub, "acme", "Migrations run in staging first."),
               "lint": await learn(hub, "acme", "The linter runs before the tests.")}
    made = Repo(hub, client, issuer, gitlab_issuer, entries)
    await write_map(hub, checkmap_dir, "acme.yaml", made.text())  # the first binding: the operator's file
    return made


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def checkmap_audit(hub: Hub) -> list[dict[str, Any]]:
    project = await hub.accounts.project("acme")
    rows = await hub.driver.read(lambda q: q.audit_rows(project.id, action="checkmap", limit=100))
    return [{"actor": r["actor"], **r["detail"]} for r in reversed(rows)]


async def test_a_check_changed_by_publishing_is_in_force_at_once(repo: Repo, client: httpx.AsyncClient, hub: Hub) -> None:
    file_sha = repo.in_force()
    assert (await repo.attest("lint")).json()["counted"] is False  # not mapped yet
    text = repo.text(checks={"migrations": [repo.entries["migrations"]], "lint": [repo.entries["lint"]]})
    r = await repo.publish(text)
    assert (r.status_code, r.json()) == (200, {"status": "applied", "sha256": sha(text)})
    assert repo.in_force() == sha(text)
    counted = await repo.attest("lint")
    assert counted.json()["counted"] is True and counted.json()["supports"][0]["entry_id"] == repo.entries["lint"]
    ready = (await client.get("/readyz")).json()["checkmaps"]
    [published] = [row for row in ready if row.get("source") == "published"]
    assert published["project"] == "acme" and published["sha256"] == sha(text) and published["error"] is None
    assert published["loaded_at"] and published["path"] == PATH
    [row] = await checkmap_audit(hub)
    assert row["status"] == "applied" and row["sha256_before"] == file_sha and row["sha256_after"] == sha(text)
    assert row["actor"] == f"oidc:{repo.github.host}:acme"
    run = row["run"]
    assert run["repository"] == "acme/api" and run["ref"] == "refs/heads/main" and run["commit"] == "1f3e8a7c2b9d4e6f8a0b1c2d3e4f5a6b7c8d9e0f"
    assert run["workflow"] == "acme/api/.github/workflows/ci.yml@refs/heads/main" and run["run"] == "8812345678 attempt 1"
    assert run["url"] == f"{repo.github.url}/acme/api/actions/runs/8812345678/attempts/1"


async def test_publishing_the_map_in_force_again_changes_nothing(repo: Repo, hub: Hub) -> None:
    before = await snapshot(hub)
    r = await repo.publish(repo.text())  # what the folder holds, as the repository holds it
    assert (r.status_code, r.json()) == (200, {"status": "unchanged", "sha256": repo.in_force()})
    after = await snapshot(hub)
    assert after.pop("seen_tokens") == before.pop("seen_tokens") + 1  # the token is spent, nothing else
    assert after == before


async def test_a_binding_changed_waits_for_the_owner(repo: Repo, client: httpx.AsyncClient, hub: Hub,
                                                     acme: ProjectTokens) -> None:
    in_force = repo.in_force()
    text = repo.text(github_refs="[refs/heads/main, refs/heads/release]")
    r = await repo.publish(text)
    assert (r.status_code, r.json()) == (202, {"status": "pending_owner", "sha256": sha(text)})
    assert repo.in_force() == in_force
    release = repo.token(ref="refs/heads/release")
    refused = await repo.attest("migrations", release)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "binding_mismatch"

    view = (await client.get("/v1/projects/acme/checkmap", headers=bearer(acme.owner))).json()
    assert view["source"] == "file" and view["sha256"] == in_force and view["path"] == "acme.yaml"
    assert view["pending"]["sha256"] == sha(text) and view["pending"]["content"] == text
    assert view["pending"]["run"]["repository"] == "acme/api" and view["pending"]["published_at"].endswith("Z")

    approved = await client.post(f"/v1/projects/acme/checkmap/pending/{sha(text)}/approve", headers=bearer(acme.owner))
    assert approved.status_code == 200, approved.text
    assert approved.json()["source"] == "published" and approved.json()["sha256"] == sha(text)
    assert approved.json()["pending"] is None and approved.json()["content"] == text
    assert repo.in_force() == sha(text)
    assert (await repo.attest("migrations", repo.token(ref="refs/heads/release"))).status_code == 201
    assert [(r["status"], r["actor"]) for r in await checkmap_audit(hub)] == [
        ("pending_owner", f"oidc:{repo.github.host}:acme"), ("approved", "olivia")]
    assert (await checkmap_audit(hub))[1]["sha256_before"] == in_force


async def test_a_newer_publication_replaces_the_pending_one(repo: Repo, client: httpx.AsyncClient, acme: ProjectTokens,
                                                            hub: Hub) -> None:
    first = repo.text(github_refs="[refs/heads/main, refs/heads/release]")
    second = repo.text(github_refs="[refs/heads/main, refs/heads/next]")
    assert (await repo.publish(first)).status_code == 202
    assert (await repo.publish(second)).status_code == 202
    again = await repo.publish(second)  # a rerun: the same map is waiting already
    assert (again.status_code, again.json()["status"]) == (202, "pending_owner")
    before = await snapshot(hub)
    late = await client.post(f"/v1/projects/acme/checkmap/pending/{sha(first)}/approve", headers=bearer(acme.owner))
    assert late.status_code == 409 and late.json()["error"]["code"] == "not_pending"
    assert sha(second) in late.json()["error"]["message"]
    assert await snapshot(hub) == before
    assert [r["status"] for r in await checkmap_audit(hub)] == ["pending_owner", "pending_owner"]
    assert (await checkmap_audit(hub))[1]["replaced"] == sha(first)


async def test_the_owner_rejects_a_pending_map(repo: Repo, client: httpx.AsyncClient, acme: ProjectTokens, hub: Hub) -> None:
    text = repo.text(github_refs='["*"]')
    assert (await repo.publish(text)).status_code == 202
    url = f"/v1/projects/acme/checkmap/pending/{sha(text)}"
    r = await client.post(f"{url}/reject", json={"reason": "any branch may not vote"}, headers=bearer(acme.owner))
    assert r.status_code == 200 and r.json()["pending"] is None and r.json()["source"] == "file"
    [_, rejected] = await checkmap_audit(hub)
    assert rejected["status"] == "rejected" and rejected["reason"] == "any branch may not vote"
    assert rejected["actor"] == "olivia" and rejected["sha256_after"] == sha(text)
    assert (await client.post(f"{url}/approve", headers=bearer(acme.owner))).status_code == 409
    feature = await repo.attest("migrations", repo.token(ref="refs/heads/feature"))
    assert feature.status_code == 403


async def test_checks_only_publication_withdraws_a_pending_binding_change(repo: Repo, client: httpx.AsyncClient,
                                                                         acme: ProjectTokens) -> None:
    pending = repo.text(github_refs="[refs/heads/main, refs/heads/release]")
    assert (await repo.publish(pending)).status_code == 202
    checks = repo.text(checks={"lint": [repo.entries["lint"]]})
    assert (await repo.publish(checks)).json()["status"] == "applied"
    view = (await client.get("/v1/projects/acme/checkmap", headers=bearer(acme.owner))).json()
    assert view["pending"] is None and view["sha256"] == sha(checks)


async def test_two_ci_systems_publish_each_judged_against_the_map_in_force(repo: Repo, client: httpx.AsyncClient,
                                                                          acme: ProjectTokens) -> None:
    github_wants = repo.text(github_refs="[refs/heads/main, refs/heads/release]")
    gitlab_wants = repo.text(checks={"lint": [repo.entries["lint"]]}, extra="    allow_events: [merge_request_event]\n")
    assert (await repo.publish(github_wants)).status_code == 202
    assert (await repo.publish(gitlab_wants, repo.gitlab_token())).status_code == 202
    view = (await client.get("/v1/projects/acme/checkmap", headers=bearer(acme.owner))).json()
    assert view["pending"]["sha256"] == sha(gitlab_wants)  # the newer publication, and whose run it was
    assert view["pending"]["run"]["repository"] == "acme/api" and "pipeline" in view["pending"]["run"]["run"]
    checks = repo.text(checks={"migrations": [repo.entries["migrations"]], "lint": [repo.entries["lint"]]})
    assert (await repo.publish(checks, repo.gitlab_token())).json()["status"] == "applied"
    assert repo.in_force() == sha(checks)


async def test_a_publication_that_drops_its_own_binding_waits_for_the_owner(repo: Repo, client: httpx.AsyncClient,
                                                                           acme: ProjectTokens) -> None:
    text = repo.text(github=False)
    assert (await repo.publish(text)).json()["status"] == "pending_owner"
    await client.post(f"/v1/projects/acme/checkmap/pending/{sha(text)}/approve", headers=bearer(acme.owner))
    refused = await repo.publish(repo.text())  # no map binds that issuer any more
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unknown_issuer"
    assert (await repo.publish(repo.text(github=False, checks={}), repo.gitlab_token())).json()["status"] == "applied"


async def test_the_folder_never_displaces_a_published_map(repo: Repo, client: httpx.AsyncClient, hub: Hub,
                                                          checkmap_dir: Path) -> None:
    text = repo.text(checks={"lint": [repo.entries["lint"]]})
    assert (await repo.publish(text)).json()["status"] == "applied"
    await write_map(hub, checkmap_dir, "acme.yaml", repo.text(checks={"tests": [repo.entries["lint"]]}))
    assert repo.in_force() == sha(text)
    rows = {row.get("file", row.get("project")): row for row in (await client.get("/readyz")).json()["checkmaps"]}
    file_row = rows[str(checkmap_dir / "acme.yaml")]
    assert file_row["sha256"] is None and file_row["source"] == "file"
    assert "not in force: project acme keeps the map acme's repository published (checkmaps/acme.yaml at 1f3e8a7c2b9d)" \
        in file_row["error"]
    assert rows["acme"]["sha256"] == sha(text) and rows["acme"]["error"] is None


async def test_a_later_operator_file_that_clashes_with_a_published_map_is_reported(
        repo: Repo, client: httpx.AsyncClient, hub: Hub, checkmap_dir: Path) -> None:
    text = repo.text(checks={"lint": [repo.entries["lint"]]})
    assert (await repo.publish(text)).json()["status"] == "applied"
    (checkmap_dir / "acme.yaml").unlink()  # the operator tidies up: the published map needs no file
    await make_project(hub, "beta")
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", github_binding(repo.github.url), {}))
    assert "beta" not in hub.checkmaps.snapshot.maps and repo.in_force() == sha(text)
    [beta] = [row for row in (await client.get("/readyz")).json()["checkmaps"] if row.get("file", "").endswith("beta.yaml")]
    assert "is already bound by project acme in the map acme's repository published" in beta["error"]
    assert "(that map stays in force)" in beta["error"]
    assert (await repo.attest("lint")).json()["project"] == "acme"


async def test_a_map_naming_another_projects_entry_is_reported_and_never_supports_it(
        repo: Repo, client: httpx.AsyncClient, hub: Hub) -> None:
    await make_project(hub, "beta")
    foreign = await learn(hub, "beta", "Beta ships on Tuesdays.")
    text = repo.text(checks={"lint": [foreign]})
    assert (await repo.publish(text)).json()["status"] == "applied"
    answer = (await repo.attest("lint")).json()
    assert answer["counted"] is True and answer["supports"] == []
    [row] = [r for r in (await client.get("/readyz")).json()["checkmaps"] if r.get("source") == "published"]
    assert row["warnings"] == [f"{PATH}:16: lint: {foreign} belongs to another project; it will never be supported "
                               "from this map"]


async def test_approval_judges_the_map_again_against_the_maps_in_force_then(
        repo: Repo, client: httpx.AsyncClient, hub: Hub, checkmap_dir: Path, acme: ProjectTokens) -> None:
    other = gitlab_binding(repo.gitlab.url).replace('"42"', '"99"')
    text = repo.text(extra=other)
    assert (await repo.publish(text)).status_code == 202
    # Meanwhile the operator binds GitLab project 99 to beta: nothing in force binds it yet.
    await make_project(hub, "beta")
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", other, {}))
    assert "beta" in hub.checkmaps.snapshot.maps
    before = await snapshot(hub)
    r = await client.post(f"/v1/projects/acme/checkmap/pending/{sha(text)}/approve", headers=bearer(acme.owner))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_checkmap"
    [problem] = r.json()["error"]["problems"]
    assert problem["message"].startswith(f"not accepted: GitLab project 99 on {repo.gitlab.host} is already bound by "
                                         "another project's map in force")
    assert "beta" not in r.text
    assert await snapshot(hub) == before
    assert (await client.get("/v1/projects/acme/checkmap", headers=bearer(acme.owner))).json()["pending"]["sha256"] == sha(text)


async def test_a_publication_racing_an_approval_never_puts_a_replaced_map_in_force(
        repo: Repo, client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    first = repo.text(github_refs="[refs/heads/main, refs/heads/release]")
    second = repo.text(github_refs="[refs/heads/main, refs/heads/next]")
    assert (await repo.publish(first)).status_code == 202
    approve, publish = await asyncio.gather(
        client.post(f"/v1/projects/acme/checkmap/pending/{sha(first)}/approve", headers=bearer(acme.owner)),
        repo.publish(second))
    view = (await client.get("/v1/projects/acme/checkmap", headers=bearer(acme.owner))).json()
    if approve.status_code == 200:  # the approval came first: the second is judged against it
        assert view["sha256"] == sha(first) and publish.status_code == 202 and view["pending"]["sha256"] == sha(second)
    else:  # the publication came first: the owner approved a map no longer pending
        assert approve.status_code == 409 and view["sha256"] != sha(first) and view["pending"]["sha256"] == sha(second)


async def test_a_second_gateway_on_the_store_serves_the_published_map(repo: Repo, config: Config, hub: Hub) -> None:
    other = Hub(config, clock=hub.clock)
    await other.start(background=False)
    try:
        await other.checkmaps.refresh(other.driver)
        text = repo.text(checks={"lint": [repo.entries["lint"]]})
        assert (await repo.publish(text)).json()["status"] == "applied"
        await other.checkmaps.refresh(other.driver)  # what its poll does every second
        assert other.checkmaps.snapshot.maps["acme"].sha256 == sha(text)
        assert other.checkmaps.snapshot.rule("acme", "lint") is not None
    finally:
        await other.stop()


async def test_the_owner_api_is_the_owners(repo: Repo, client: httpx.AsyncClient, hub: Hub, acme: ProjectTokens) -> None:
    beta = await make_project(hub, "beta")
    text = repo.text(github_refs='["*"]')
    await repo.publish(text)
    before = await snapshot(hub)
    url = f"/v1/projects/acme/checkmap/pending/{sha(text)}"
    for token in (acme.reader, acme.writer):
        for method, path in (("GET", "/v1/projects/acme/checkmap"), ("POST", f"{url}/approve"), ("POST", f"{url}/reject")):
            r = await client.request(method, path, headers=bearer(token))
            assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_level", (method, path)
    r = await client.post(f"{url}/approve", headers=bearer(beta.owner))
    assert r.status_code == 404
    r = await client.post(f"/v1/projects/acme/checkmap/pending/{'0' * 64}/approve", headers=bearer(acme.owner))
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_pending"
    r = await client.post(f"{url}/approve", json={"force": True}, headers=bearer(acme.owner))
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_field"
    r = await client.post(f"{url}/reject", json={"reason": "no\u202e"}, headers=bearer(acme.owner))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invisible_text"
    assert await snapshot(hub) == before


async def test_a_project_without_any_map_shows_none(client: httpx.AsyncClient, hub: Hub) -> None:
    beta = await make_project(hub, "beta")
    view = (await client.get("/v1/projects/beta/checkmap", headers=bearer(beta.owner))).json()
    assert view == {"source": None, "path": None, "sha256": None, "content": None, "published_at": None, "run": None,
                    "pending": None}
