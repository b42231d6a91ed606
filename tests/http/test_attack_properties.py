"""The trust gate as an attacker's property, through the HTTP doors.

For any sequence of what an agent can do (learn, thread messages, proposals,
events with any payload, recalls, uses, owner-only calls with its own token,
webhook deliveries signed with any secret an agent could know, and the CI
tokens an agent can make GitHub or GitLab mint for it: pull requests,
comments, merge queues, its own branches, its own issuer, also publishing a
check map with them), no entry becomes trusted and no issuer is credited:
no support row, no `promote` or `override` in the ledger, no published map.  K is 1, so a single credited vote would promote.

The gateway under attack is the real app (SQLite file, check map folder,
test OIDC issuer on 127.0.0.1 bound by the check map) reached over httpx's
ASGI transport; each example gets a fresh store.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.ci import webhook_signatures as sig
from gateway.core.clock import ManualClock
from gateway.core.config import Config
from gateway.core.visible import describe, first_invisible, marked
from gateway.hub import Hub
from tests.support.oidc_issuer import OidcIssuer

GH_SECRET_ENV = "PROP_ACME_GH_SECRET"
CANARY_SECRET_ENV = "PROP_ACME_CANARY_SECRET"
# The operator's secrets: in the environment, never in the YAML, never given to an agent.
OPERATOR_GH_SECRET = "operator-only-" + base64.b64encode(os.urandom(24)).decode()
OPERATOR_CANARY_SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()

# Runs an agent can start without the maintainer: each must never vote.
AGENT_GITHUB_RUNS = [
    {"event_name": "pull_request", "ref": "refs/pull/7/merge"},
    {"event_name": "pull_request", "ref": "refs/heads/main"},
    {"event_name": "pull_request_target"},
    {"event_name": "workflow_run"},
    {"event_name": "issue_comment"},
    {"event_name": "merge_group", "ref": "refs/heads/gh-readonly-queue/main/pr-7"},
    {"event_name": "push", "ref": "refs/heads/agent-branch"},
    {"event_name": "workflow_dispatch", "ref": "refs/heads/agent-branch"},
    {"event_name": "push", "ref": "refs/tags/main", "ref_type": "tag"},
]
AGENT_GITLAB_RUNS = [
    {"pipeline_source": "merge_request_event"},
    {"ref_protected": "false"},
    {"ref": "agent-branch", "ref_protected": "false"},
    {"ref": "main", "ref_type": "tag"},
]
# Letters, white space a person sees, and one of each kind of character a person does not.
HIDDEN_ALPHABET = ["a", " ", "\t", "\n", "\r", "\x00", "\x1c", "\x85", "\u00ad", "\u200b", "\u200d", "\u202e",
                   "\u2066", "\ufeff", "\uffff", "\ufdd0", "\U000e0041", "\U000e007f", "\u2028", "<", "&"]
WEBHOOK_EVENTS = ["pull_request", "pull_request_target", "workflow_run", "issue_comment", "merge_group", "push"]


@pytest.fixture(scope="module")
def issuers() -> Iterator[tuple[OidcIssuer, OidcIssuer, OidcIssuer]]:
    with OidcIssuer() as github, OidcIssuer() as gitlab, OidcIssuer() as own:
        yield github, gitlab, own


def _checkmap(github: OidcIssuer, gitlab: OidcIssuer, entry_ids: list[str]) -> str:
    return f"""project: acme
issuers:
  - provider: github-actions
    issuer: {github.url}
    repository: acme/api
    repository_id: "123456"
    repository_owner_id: "7890"
    refs: [refs/heads/main]
    webhook_secret_env: {GH_SECRET_ENV}
  - provider: gitlab
    issuer: {gitlab.url}
    project_path: acme/api
    project_id: "42"
    refs: [main]
  - provider: webhook
    source: nightly-canary
    secret_env: {CANARY_SECRET_ENV}
checks:
  migrations:
    supports: [{", ".join(entry_ids)}]
"""


def _registry(hub: Hub) -> Any:
    services = getattr(hub, "services", None)
    if services is not None and hasattr(services, "checkmaps"):
        return services.checkmaps
    return hub.checkmaps


# -- what an agent may try ------------------------------------------------------

text = st.text(max_size=40)
kinds = st.sampled_from(["fact", "convention", "pitfall", "decision", "trusted"])
free_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
promote_words = st.sampled_from(["state", "trusted", "promoted_by", "distinct_issuers", "supports", "confirm"])

action = st.one_of(
    st.tuples(st.just("learn"), kinds, text, st.dictionaries(promote_words, free_json, max_size=2)),
    st.tuples(st.just("thread"), st.sampled_from([
        "We decided to use uv because pip is slow.", "Convention: tests live beside files.",
        "We chose main because it is trusted, so it must be trusted.",
    ]), text),
    st.tuples(st.just("propose"), kinds, text),
    st.tuples(st.just("event"), st.sampled_from(["error", "success", "support", "attestation", "promote"]),
              st.dictionaries(st.sampled_from(["contradicts", "supports", "issuer", "check", "state"]),
                              free_json | st.just("@entry"), max_size=3)),
    st.tuples(st.just("recall"), text),
    st.tuples(st.just("used")),
    st.tuples(st.just("owner_only"), st.sampled_from(["confirm", "settings", "approve"])),
    st.tuples(st.just("github_hook"), st.sampled_from(WEBHOOK_EVENTS), st.integers(0, 20), st.booleans(),
              st.sampled_from(["bound", "github.com", None])),
    st.tuples(st.just("standard_hook"), st.integers(0, 5)),
    st.tuples(st.just("github_token"), st.integers(0, len(AGENT_GITHUB_RUNS) - 1)),
    st.tuples(st.just("gitlab_token"), st.integers(0, len(AGENT_GITLAB_RUNS) - 1)),
    st.tuples(st.just("own_issuer_token")),
    # The check map door, with every token an agent can have minted: a map letting its runs vote.
    st.tuples(st.just("publish"), st.integers(0, len(AGENT_GITHUB_RUNS) + len(AGENT_GITLAB_RUNS))),
)


class Attacker:
    """One agent with a write token and a read token of project acme."""

    def __init__(self, client: httpx.AsyncClient, hub: Hub, tokens: dict[str, str],
                 issuers: tuple[OidcIssuer, OidcIssuer, OidcIssuer]) -> None:
        self.client, self.hub, self.tokens = client, hub, tokens
        self.github, self.gitlab, self.own = issuers
        self.entries: list[str] = []
        self.recalls: list[tuple[str, str]] = []
        self.proposals: list[str] = []
        self.deliveries = 0

    def known_secrets(self) -> list[str]:
        """Everything an agent could hope to sign with: what it holds and what the YAML says."""
        held = [self.tokens["writer"], self.tokens["reader"], "", "acme", GH_SECRET_ENV, CANARY_SECRET_ENV, "123456"]
        return held + ["whsec_" + base64.b64encode(s.encode()).decode() for s in held if s]

    def auth(self, level: str = "writer") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[level]}"}

    async def do(self, step: tuple[Any, ...]) -> None:
        name = step[0]
        base = "/v1/projects/acme"
        now = self.hub.clock.now()
        if name == "learn":
            body = {"kind": step[1], "statement": step[2] or "x", **step[3]}
            r = await self.client.post(f"{base}/entries", json=body, headers=self.auth())
            if r.status_code in (200, 201):
                self.entries.append(r.json()["id"])
        elif name == "thread":
            r = await self.client.post(f"{base}/threads/t-1/messages", json={"author": "agent", "text": step[1] + step[2]},
                                       headers=self.auth())
            if r.status_code == 201:
                self.entries.extend(r.json()["candidates"])
        elif name == "propose":
            r = await self.client.post(f"{base}/proposals", json={"kind": step[1], "statement": step[2] or "y",
                                                                  "rationale": "because"}, headers=self.auth())
            if r.status_code == 201 and "id" in r.json():
                self.proposals.append(r.json()["id"])
        elif name == "event":
            target = self.entries[-1] if self.entries else "kn_unknown"
            detail = {k: (target if v == "@entry" else v) for k, v in step[2].items()}
            await self.client.post(f"{base}/events", json={"type": step[1], "detail": detail}, headers=self.auth())
        elif name == "recall":
            for level in ("writer", "reader"):
                r = await self.client.get(f"{base}/recall", params={"q": step[1] or "anything"}, headers=self.auth(level))
                if r.status_code == 200:
                    for entry in r.json()["entries"]:
                        self.recalls.append((level, r.json()["recall_id"]))
                        assert entry["state"] == "trusted"  # nothing else is ever recalled
        elif name == "used" and self.recalls and self.entries:
            level, recall_id = self.recalls[-1]
            await self.client.post(f"{base}/recall_used", json={"recall_id": recall_id, "entry_id": self.entries[-1]},
                                   headers=self.auth(level))
        elif name == "owner_only":
            target = self.entries[-1] if self.entries else "kn_unknown"
            if step[1] == "confirm":
                r = await self.client.post(f"{base}/entries/{target}/confirm", headers=self.auth())
            elif step[1] == "settings":
                r = await self.client.patch(f"{base}/settings", json={"k_distinct_issuers": 1}, headers=self.auth())
            else:
                proposal = self.proposals[-1] if self.proposals else "pr_unknown"
                r = await self.client.post(f"{base}/proposals/{proposal}/approve", headers=self.auth())
            assert r.status_code in (403, 404), r.text
        elif name == "github_hook":
            secret = self.known_secrets()[step[2] % len(self.known_secrets())]
            if step[2] == 20:  # the operator's secret itself, on a run an agent can start: still no vote
                secret = OPERATOR_GH_SECRET
            self.deliveries += 1
            payload = {
                "action": "completed",
                "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890}},
                "workflow_run": {
                    "id": 9000 + self.deliveries, "run_attempt": 1, "name": "migrations", "conclusion": "success",
                    # With the operator's secret, a push to main is CI itself; an agent pushes its own branch.
                    "event": step[1], "head_branch": "agent-branch" if secret == OPERATOR_GH_SECRET else "main",
                    "head_sha": "a" * 40,
                    "path": ".github/workflows/ci.yml", "head_repository": {"id": 123456 if step[3] else 999},
                },
            }
            raw = json.dumps(payload).encode()
            headers = {"Content-Type": "application/json", "X-GitHub-Event": "workflow_run",
                       "X-GitHub-Delivery": f"d-{self.deliveries}", "X-Hub-Signature-256": sig.github_sign(secret, raw)}
            if step[4] is not None:  # the test issuer is a GitHub Enterprise Server: its host is the bound one
                headers["X-GitHub-Enterprise-Host"] = self.github.host if step[4] == "bound" else step[4]
            r = await self.client.post("/v1/webhooks/github", content=raw, headers=headers)
            assert r.status_code < 500, r.text
        elif name == "standard_hook":
            secret = self.known_secrets()[step[1] % len(self.known_secrets())]
            key = sig.standard_key(secret) or secret.encode() or b"k"
            self.deliveries += 1
            raw = json.dumps({"check": "migrations", "outcome": "success"}).encode()
            message_id = f"msg-{self.deliveries}"
            r = await self.client.post("/v1/webhooks/nightly-canary", content=raw, headers={
                "Content-Type": "application/json", "webhook-id": message_id, "webhook-timestamp": str(int(now)),
                "webhook-signature": sig.standard_sign(key, message_id, int(now), raw)})
            assert r.status_code in (401, 403, 404), r.text
        elif name == "publish":
            index = step[1]
            if index < len(AGENT_GITHUB_RUNS):
                token = self.github.github_token(now, **AGENT_GITHUB_RUNS[index])
            elif index - len(AGENT_GITHUB_RUNS) < len(AGENT_GITLAB_RUNS):
                token = self.gitlab.gitlab_token(now, **AGENT_GITLAB_RUNS[index - len(AGENT_GITHUB_RUNS)])
            else:
                token = self.own.github_token(now)
            wide = _checkmap(self.github, self.gitlab, self.entries[:2]).replace(
                "refs: [refs/heads/main]", 'refs: ["*"]\n    allow_events: [pull_request, pull_request_target, issue_comment]')
            r = await self.client.post("/v1/checkmaps", json={"project": "acme", "path": "checkmaps/acme.yaml",
                                                             "content": wide}, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code in (401, 403), r.text
        elif name in ("github_token", "gitlab_token", "own_issuer_token"):
            if name == "github_token":
                token = self.github.github_token(now, **AGENT_GITHUB_RUNS[step[1]])
            elif name == "gitlab_token":
                token = self.gitlab.gitlab_token(now, **AGENT_GITLAB_RUNS[step[1]])
            else:
                token = self.own.github_token(now)  # a perfect GitHub-shaped token from an issuer nobody bound
            r = await self.client.post("/v1/attestations", json={"check": "migrations", "outcome": "success"},
                                       headers={"Authorization": f"Bearer {token}"})
            assert r.status_code in (401, 403), r.text


async def _attack(steps: list[tuple[Any, ...]], issuers: tuple[OidcIssuer, OidcIssuer, OidcIssuer]) -> None:
    from gateway.web.app import build_app

    github, gitlab, _ = issuers
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "checkmaps"
        folder.mkdir()
        config = Config.from_env({}, database_url=f"sqlite:///{Path(tmp) / 'p.db'}", checkmaps=str(folder),
                                 allow_insecure_issuers=True, sweep_interval=0.0,
                                 github_webhook_secret=None)
        hub = Hub(config, clock=ManualClock(start=time.time()))
        app = build_app(hub, manage_hub=False)
        await hub.start(background=False)
        try:
            await hub.accounts.create_project("acme", k=1)  # one credited vote would promote
            tokens = {
                "writer": await hub.accounts.create_token("acme", "write", "agent-7"),
                "reader": await hub.accounts.create_token("acme", "read", "agent-9"),
                "victim": await hub.accounts.create_token("acme", "write", "agent-3"),
            }
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8750") as client:
                # Candidates the check map maps, written by another agent and by the attacker.
                seeded = []
                for who, statement in (("victim", "Seeded candidate of another agent."),
                                       ("writer", "The attacker's own candidate.")):
                    r = await client.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": statement},
                                          headers={"Authorization": f"Bearer {tokens[who]}"})
                    seeded.append(r.json()["id"])
                (folder / "acme.yaml").write_text(_checkmap(github, gitlab, seeded))
                await _registry(hub).refresh(hub.driver)
                attacker = Attacker(client, hub, tokens, issuers)
                attacker.entries.extend(seeded)
                for step in steps:
                    await attacker.do(step)
                    hub.clock.advance(30)  # type: ignore[attr-defined]

            async def unit(q: Any) -> dict[str, Any]:
                return {
                    "trusted": await q.tx.all("SELECT id FROM entries WHERE state = 'trusted'"),
                    "supports": await q.tx.all("SELECT * FROM supports"),
                    "moves": await q.tx.all("SELECT action FROM audit WHERE action IN ('promote', 'override', 'support')"),
                    "counted": await q.tx.all("SELECT id FROM attestations WHERE counted"),
                    "published": await q.tx.all("SELECT id FROM published_checkmaps"),
                }

            found = await hub.driver.read(unit)
            assert found == {"trusted": [], "supports": [], "moves": [], "counted": [], "published": []}, found
        finally:
            await hub.stop()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(steps=st.lists(action, min_size=1, max_size=14))
def test_no_sequence_of_agent_actions_trusts_an_entry_or_credits_an_issuer(
        steps: list[tuple[Any, ...]], issuers: tuple[OidcIssuer, OidcIssuer, OidcIssuer]) -> None:
    saved = {name: os.environ.get(name) for name in (GH_SECRET_ENV, CANARY_SECRET_ENV)}
    os.environ[GH_SECRET_ENV] = OPERATOR_GH_SECRET
    os.environ[CANARY_SECRET_ENV] = OPERATOR_CANARY_SECRET
    try:
        asyncio.run(_attack(steps, issuers))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_the_operator_secrets_do_vote(issuers: tuple[OidcIssuer, OidcIssuer, OidcIssuer]) -> None:
    """The property above could pass by a broken door that refuses everything:
    the same doors, with the operator's secret and a push to main, do vote."""
    os.environ[GH_SECRET_ENV] = OPERATOR_GH_SECRET
    github, gitlab, _ = issuers

    async def run() -> None:
        from gateway.web.app import build_app

        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "checkmaps"
            folder.mkdir()
            config = Config.from_env({}, database_url=f"sqlite:///{Path(tmp) / 'p.db'}", checkmaps=str(folder),
                                     allow_insecure_issuers=True, sweep_interval=0.0)
            hub = Hub(config, clock=ManualClock(start=time.time()))
            app = build_app(hub, manage_hub=False)
            await hub.start(background=False)
            try:
                await hub.accounts.create_project("acme", k=2)
                writer = await hub.accounts.create_token("acme", "write", "agent-7")
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
                    r = await c.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": "Voted on."},
                                     headers={"Authorization": f"Bearer {writer}"})
                    entry = r.json()["id"]
                    (folder / "acme.yaml").write_text(_checkmap(github, gitlab, [entry]))
                    await _registry(hub).refresh(hub.driver)
                    payload = {"action": "completed",
                               "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890}},
                               "workflow_run": {"id": 1, "run_attempt": 1, "name": "migrations", "conclusion": "success",
                                                "event": "push", "head_branch": "main", "head_sha": "a" * 40,
                                                "path": ".github/workflows/ci.yml", "head_repository": {"id": 123456}}}
                    raw = json.dumps(payload).encode()
                    r = await c.post("/v1/webhooks/github", content=raw, headers={
                        "Content-Type": "application/json", "X-GitHub-Event": "workflow_run",
                        "X-GitHub-Enterprise-Host": github.host,
                        "X-Hub-Signature-256": sig.github_sign(OPERATOR_GH_SECRET, raw)})
                    assert r.status_code == 201, r.text
                    assert r.json()["attestations"][0]["counted"] is True
                    token = gitlab.gitlab_token(hub.clock.now())
                    r = await c.post("/v1/attestations", json={"check": "migrations", "outcome": "success"},
                                     headers={"Authorization": f"Bearer {token}"})
                    assert r.status_code == 201, r.text
                    assert r.json()["promoted"] == [entry]
                    # The check map door takes a push to main: the wider map waits for the owner.
                    wide = _checkmap(github, gitlab, [entry]).replace("refs: [refs/heads/main]", 'refs: ["*"]')
                    r = await c.post("/v1/checkmaps", json={"project": "acme", "path": "checkmaps/acme.yaml",
                                                            "content": wide},
                                     headers={"Authorization": f"Bearer {github.github_token(hub.clock.now())}"})
                    assert (r.status_code, r.json()["status"]) == (202, "pending_owner"), r.text
            finally:
                await hub.stop()

    try:
        asyncio.run(run())
    finally:
        os.environ.pop(GH_SECRET_ENV, None)


# -- what the owner sees is what agents are served ------------------------------------------

_CARD = re.compile(r'data-entry-id="(?P<id>[^"]+)"[^>]*>.*?<p class="statement[^"]*">(?P<text>.*?)</p>', re.S)
_TAG = re.compile(r"<[^>]+>")


def drawn_statements(page: str) -> dict[str, str]:
    """Entry id -> the text a browser draws for its statement (the page's
    text content: tags dropped, character references read)."""
    return {m["id"]: html.unescape(_TAG.sub("", m["text"])) for m in _CARD.finditer(page)}


async def _drawn_and_served(written: str, as_stored: bool) -> None:
    from gateway.web.app import build_app
    from tests.support.dashboard_helpers import HTML, login

    statement = f"Zebra note {written}"
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.from_env({}, database_url=f"sqlite:///{Path(tmp) / 'p.db'}", checkmaps=str(Path(tmp)),
                                 sweep_interval=0.0)
        hub = Hub(config, clock=ManualClock(start=time.time()))
        app = build_app(hub, manage_hub=False)
        await hub.start(background=False)
        try:
            await hub.accounts.create_project("acme")
            owner = await hub.accounts.create_token("acme", "owner", "olivia")
            writer = await hub.accounts.create_token("acme", "write", "agent-7")
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750") as c:
                agent, boss = {"Authorization": f"Bearer {writer}"}, {"Authorization": f"Bearer {owner}"}
                await c.patch("/v1/projects/acme/settings", json={"playbook_min_trusted": 1}, headers=boss)
                r = await c.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": statement}, headers=agent)
                hidden = first_invisible(statement)
                if hidden is not None:  # refused, naming the first one, and nothing written
                    assert r.status_code == 422 and r.json()["error"]["code"] == "invisible_text", r.text
                    assert describe(*hidden) in r.json()["error"]["message"]
                    assert await hub.driver.read(lambda q: q.count_rows("entries")) == 0
                else:
                    assert r.status_code == 201, r.text
                if hidden is not None or as_stored:
                    # The same text in a store written before the rule (or imported).
                    r = await c.post("/v1/projects/acme/entries", json={"kind": "fact", "statement": "Zebra placeholder."},
                                     headers=agent)
                    await hub.driver.write(lambda q: q.tx.run("UPDATE entries SET statement = ?", statement))
                entry_id = r.json()["id"]
                assert (await c.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=boss)).status_code == 200

                recalled = (await c.get("/v1/projects/acme/recall", params={"q": "zebra note"}, headers=agent)).json()
                served = {e["id"]: e["statement"] for e in recalled["entries"]}
                one = (await c.get(f"/v1/projects/acme/entries/{entry_id}", headers=agent)).json()["statement"]
                document = (await c.get("/projects/acme/RELAYROOM.md", headers=agent)).text
                line = next(x for x in document.splitlines() if x.endswith(f"(`{entry_id}`)"))
                await login(c, owner)
                knowledge = drawn_statements((await c.get("/projects/acme/knowledge", headers=HTML)).text)
                page = drawn_statements((await c.get(f"/projects/acme/entries/{entry_id}", headers=HTML)).text)

            assert served == {entry_id: one}
            assert knowledge[entry_id] == page[entry_id] == one, (statement, one)
            assert line == f"- {' '.join(one.split())} (`{entry_id}`)"
            assert first_invisible(one) is None and first_invisible(document) is None
            assert one == (statement if hidden is None else marked(statement))
        finally:
            await hub.stop()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written=st.text(max_size=40) | st.text(alphabet=st.sampled_from(HIDDEN_ALPHABET), max_size=12),
       as_stored=st.booleans())
def test_what_the_owner_sees_is_what_agents_are_served(written: str, as_stored: bool) -> None:
    """For any text an agent writes, accepted or refused (and then found in an
    old store), the statement the owner's pages draw is the statement every
    agent door serves, and neither holds an invisible character."""
    asyncio.run(_drawn_and_served(written, as_stored))
