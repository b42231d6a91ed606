"""`POST /v1/checkmaps` as an attacker meets it.

Who controls what: the body (project, path, text) is the job's, so whoever
can make a job run chooses it; the claims are the issuer's.  An agent that
can open pull requests, push a branch the binding does not list, or run CI
in another repository (anyone can, on GitHub), or a project that shares
the hub, gets nothing through this door: each refusal below is the code of
5.1 (or 422), the map in force stays, and nothing is written or spent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from gateway.hub import Hub
from tests.conftest import make_project
from tests.http.test_checkmap_publish import PATH, Repo, sha
from tests.http.test_checkmap_publish import repo  # noqa: F401 (fixture)
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_issuer, issuer, write_map  # noqa: F401
from tests.support.helpers import bearer, snapshot

Token = Callable[[Repo], str]

# Tokens of runs that may not publish acme's map: (their refusal, how the run is made).
RUNS: dict[str, tuple[int, str, Token]] = {
    "a pull request's run": (403, "event_not_allowed", lambda r: r.token(event_name="pull_request", ref="refs/pull/7/merge")),
    "pull_request_target on main": (403, "event_not_allowed", lambda r: r.token(event_name="pull_request_target")),
    "a comment's run on main": (403, "event_not_allowed", lambda r: r.token(event_name="issue_comment")),
    "a push to an unlisted branch": (403, "binding_mismatch", lambda r: r.token(ref="refs/heads/feature")),
    "a tag named main": (403, "binding_mismatch", lambda r: r.token(ref="refs/tags/main", ref_type="tag")),
    "a fork's repository": (403, "binding_mismatch", lambda r: r.token(repository_id="999", repository="evil/api")),
    "a GitLab merge request pipeline": (403, "event_not_allowed", lambda r: r.gitlab_token(pipeline_source="merge_request_event")),
    "an unprotected GitLab ref": (403, "binding_mismatch", lambda r: r.gitlab_token(ref_protected="false")),
    "a token for another audience": (401, "invalid_audience", lambda r: r.token(audience="https://github.com/acme")),
    "an expired token": (401, "token_expired", lambda r: r.token(exp=int(r.hub.clock.now()) - 600)),
    "a token with no jti": (401, "missing_claim", lambda r: r.token(jti=None)),
    "no token at all": (401, "missing_credential", lambda r: ""),
    "a project token": (401, "malformed_token", lambda r: "rr_not-a-jwt"),
}


async def refused(repo: Repo, hub: Hub, status: int, code: str, **kwargs: Any) -> httpx.Response:  # noqa: F811
    """Publish, expect the refusal, and prove that nothing changed."""
    before, in_force = await snapshot(hub), repo.in_force()
    r = await repo.publish(kwargs.pop("text", None) or repo.text(github_refs='["*"]'), **kwargs)
    assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    assert await snapshot(hub) == before and repo.in_force() == in_force
    return r


@pytest.mark.parametrize("run", RUNS.values(), ids=RUNS.keys())
async def test_a_run_that_may_not_vote_may_not_publish(repo: Repo, hub: Hub, run: tuple[int, str, Token]) -> None:  # noqa: F811
    status, code, token = run
    await refused(repo, hub, status, code, token=token(repo))


async def test_another_projects_repository_publishes_nothing_for_acme(repo: Repo, hub: Hub, checkmap_dir: Path) -> None:  # noqa: F811
    await make_project(hub, "beta")
    beta_repo = github_binding(repo.github.url).replace('"123456"', '"555"')
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", beta_repo, {}))
    beta_token = repo.token(repository_id="555", repository="beta/app")
    r = await refused(repo, hub, 403, "project_mismatch", token=beta_token)
    assert "beta" not in r.text
    # acme's own CI naming beta: beta's map does not bind acme's repository.
    r = await refused(repo, hub, 403, "project_mismatch", project="beta",
                      text=checkmap("beta", github_binding(repo.github.url), {}))
    assert "acme" not in r.json()["error"]["message"]
    # A project that does not exist: as an unbound project.
    await refused(repo, hub, 403, "project_mismatch", project="gamma", text=checkmap("gamma", beta_repo, {}))


async def test_a_replayed_token_is_refused_across_both_doors(repo: Repo, hub: Hub) -> None:  # noqa: F811
    token = repo.token()
    assert (await repo.attest("migrations", token)).status_code == 201
    await refused(repo, hub, 409, "token_reused", token=token)
    fresh = repo.token()
    text = repo.text(checks={"lint": [repo.entries["lint"]]})
    assert (await repo.publish(text, fresh)).json()["status"] == "applied"
    await refused(repo, hub, 409, "token_reused", token=fresh, text=repo.text())
    r = await repo.attest("migrations", fresh)
    assert r.status_code == 409 and r.json()["error"]["code"] == "token_reused"


# Bodies that are refused before anything is judged.
BODIES: dict[str, tuple[int, str, Callable[[str], Any]]] = {
    "an unknown field": (422, "unknown_field", lambda text: {"project": "acme", "path": PATH, "content": text, "trusted": True}),
    "no content": (422, "missing_field", lambda text: {"project": "acme", "path": PATH}),
    "content not text": (422, "invalid_field", lambda text: {"project": "acme", "path": PATH, "content": {"project": "acme"}}),
    "a path that is no path": (422, "invalid_field", lambda text: {"project": "acme", "path": "", "content": text}),
    "a path with a hidden character": (422, "invisible_text", lambda text: {"project": "acme", "path": "checkmaps/\u202eacme.yaml",
                                                                           "content": text}),
    "a project that is no slug": (422, "invalid_field", lambda text: {"project": "Acme!", "path": PATH, "content": text}),
    "not an object": (400, "malformed_json", lambda text: [text]),
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
async def test_a_malformed_body_is_refused(repo: Repo, hub: Hub, body: tuple[int, str, Callable[[str], Any]]) -> None:  # noqa: F811
    status, code, make = body
    before, token = await snapshot(hub), repo.token()
    r = await repo.client.post("/v1/checkmaps", json=make(repo.text(github_refs='["*"]')), headers=bearer(token))
    assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    assert await snapshot(hub) == before
    assert (await repo.attest("migrations", token)).status_code == 201, "a refused publication spends no token"


def publication_of(text: str, size: int) -> bytes:
    """A body publishing `text` padded with a comment to exactly `size` bytes."""
    bare = json.dumps({"project": "acme", "path": PATH, "content": text + "# \n"}).encode()
    padded = json.dumps({"project": "acme", "path": PATH, "content": text + "# " + "x" * (size - len(bare)) + "\n"})
    assert len(padded.encode()) == size
    return padded.encode()


async def test_a_body_past_64_kib_is_413_like_the_rest_of_the_api(repo: Repo, hub: Hub) -> None:  # noqa: F811
    """A publication is no webhook: the API's 64 KiB, not a webhook's 1 MiB."""
    before, in_force, token = await snapshot(hub), repo.in_force(), repo.token()
    headers = {**bearer(token), "Content-Type": "application/json"}
    r = await repo.client.post("/v1/checkmaps", content=publication_of(repo.text(), 64 * 1024 + 1), headers=headers)
    assert (r.status_code, r.json()["error"]["code"]) == (413, "body_too_large"), r.text
    assert "64 KiB" in r.json()["error"]["message"]
    assert await snapshot(hub) == before and repo.in_force() == in_force
    assert (await repo.attest("migrations", token)).status_code == 201, "a refused publication spends no token"
    r = await repo.client.post("/v1/checkmaps", content=publication_of(repo.text(), 64 * 1024),
                               headers={**bearer(repo.token()), "Content-Type": "application/json"})
    assert (r.status_code, r.json()["status"]) == (200, "applied"), r.text


# Each makes acme's map invalid: (how, from the valid text; the problem's line; what it says).
INVALID: dict[str, tuple[Callable[[str], str], int, str]] = {
    "not YAML": (lambda base: "project: acme\nissuers: [\n", 3, "not valid YAML"),
    "a misspelt key": (lambda base: base.replace("    refs: [refs/heads/main]", "    ref: [refs/heads/main]", 1), 8,
                       "unknown key ref: did you mean `refs`?"),
    "another project's name": (lambda base: base.replace("project: acme", "project: beta"), 1,
                               "this file maps project beta; it was published for project acme"),
    "a secret written in": (lambda base: base.replace("    refs: [refs/heads/main]\n",
                                                      "    refs: [refs/heads/main]\n    secret: hunter2\n", 1), 9,
                            "a secret must never be written into a check map"),
    "a direction override in a comment": (lambda base: "# main \u202e niam\n" + base, 1,
                                          "U+202E at character 8 cannot be seen for what it is"),
}


@pytest.mark.parametrize("case", INVALID.values(), ids=INVALID.keys())
async def test_an_invalid_map_is_a_problem_at_its_repository_line(
        repo: Repo, hub: Hub, case: tuple[Callable[[str], str], int, str]) -> None:  # noqa: F811
    make, line, message = case
    r = await refused(repo, hub, 422, "invalid_checkmap", text=make(repo.text()))
    problems = r.json()["error"]["problems"]
    assert any(p["line"] == line and message in p["message"] for p in problems), problems
    assert r.json()["error"]["message"].startswith(f"the check map is not valid: {PATH}:")
    assert "the map in force stays" in r.json()["error"]["message"]


async def test_a_map_binding_another_projects_repository_is_refused_and_names_no_project(
        repo: Repo, hub: Hub, checkmap_dir: Path) -> None:  # noqa: F811
    await make_project(hub, "beta")
    theirs = github_binding(repo.github.url).replace('"123456"', '"555"')
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", theirs, {}))
    r = await refused(repo, hub, 422, "invalid_checkmap", text=repo.text(extra=theirs))
    [problem] = r.json()["error"]["problems"]
    assert problem["message"] == (f"not accepted: GitHub repository 555 on {repo.github.host} is already bound by another "
                                  "project's map in force; one repository's CI speaks for one project unless both maps "
                                  "consent (shared_with on each side): the gateway's operator can say which project binds it")
    assert "beta" not in r.text and str(checkmap_dir) not in r.text
    # Naming beta under shared_with, acme's map may learn that beta is the one that did not consent.
    r = await refused(repo, hub, 422, "invalid_checkmap", text=repo.text(extra=theirs + "    shared_with: [beta]\n"))
    assert "already bound by project beta in project beta's map" in r.json()["error"]["problems"][0]["message"]


async def test_a_map_binding_by_ids_an_issuer_another_map_binds_by_sub_takes_nothing_out_of_force(
        repo: Repo, hub: Hub, checkmap_dir: Path) -> None:  # noqa: F811
    await make_project(hub, "beta")
    theirs = "\n  - provider: oidc\n    issuer: https://ci.example.com\n    subject: repo:beta\n"
    await write_map(hub, checkmap_dir, "beta.yaml", checkmap("beta", theirs, {}))
    mine = "\n  - provider: gitlab\n    issuer: https://ci.example.com\n    project_id: \"7\"\n    refs: [main]\n"
    r = await refused(repo, hub, 422, "invalid_checkmap", text=repo.text(extra=mine))
    assert "ci.example.com is bound by sub in another project's map in force" in r.text
    assert "beta" in hub.checkmaps.snapshot.maps


async def test_the_pending_map_in_force_is_never_one_the_owner_did_not_name(
        repo: Repo, hub: Hub) -> None:  # noqa: F811
    """Whatever CI publishes after a binding change, the voices stay as they were until the owner approves."""
    in_force = repo.in_force()
    for refs in ('["*"]', "[refs/heads/main, refs/heads/dev]", "[refs/heads/dev]"):
        assert (await repo.publish(repo.text(github_refs=refs))).status_code == 202
        assert repo.in_force() == in_force
    wider = repo.text(github_refs='["*"]', checks={"lint": [repo.entries["lint"]]})
    assert (await repo.publish(wider)).status_code == 202, "checks riding along a binding change wait too"
    r = await repo.attest("lint", repo.token(ref="refs/heads/dev"))
    assert r.status_code == 403 and r.json()["error"]["code"] == "binding_mismatch"
    assert sha(wider) != in_force
