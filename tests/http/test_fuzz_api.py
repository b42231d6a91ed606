"""schemathesis against /openapi.json, with each token level of a seeded project.

For every operation the document describes, schema-conforming and
schema-violating requests go to a real uvicorn server on 127.0.0.1 with a
read, a write and an owner token.  What must hold for every one of them:

- never a 5xx;
- every refusal is the contract's body `{"error": {"code": snake_case, "message": str}}`;
- every status is one the document lists for the operation, and a 2xx
  JSON answer matches the schema the document gives for it;
- nothing an agent can send makes an entry trusted: after the read and the
  write runs, the set of trusted entries is exactly what it was before.

Bounded and deterministic: a fixed number of examples per operation and level,
`derandomize=True`, no example database.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, Iterator

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from gateway.core.clock import SystemClock
from gateway.core.config import Config
from gateway.hub import Hub
from gateway.web.openapi_spec import spec
from gateway.web.app import build_app
from tests.conftest import LiveServer

pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 40  # per level; ~90 s budget for the file on 2 cores
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
ACME = {"project": "acme"}
CODE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")

SCHEMA = schemathesis.openapi.from_dict(spec())


class Seeded:
    """A live gateway with project `acme`: a few candidates, trusted and
    contradicted entries, a proposal, and one token per level."""

    def __init__(self, server: LiveServer, hub: Hub, tokens: dict[str, str], entry_ids: list[str], proposal_ids: list[str]) -> None:
        self.server = server
        self.hub = hub
        self.tokens = tokens
        self.entry_ids = entry_ids
        self.proposal_ids = proposal_ids

    def run(self, coro: Any) -> Any:
        assert self.hub.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.hub.loop).result(30)

    def trusted(self) -> set[str]:
        async def read() -> set[str]:
            rows = await self.hub.driver.read(lambda q: q.tx.all("SELECT id FROM entries WHERE state = 'trusted'"))
            return {r["id"] for r in rows}

        return self.run(read())

    def promotion_rows(self) -> int:
        return self.audit_count("'promote', 'override'")

    def audit_count(self, actions: str) -> int:
        async def read() -> int:
            rows = await self.hub.driver.read(
                lambda q: q.tx.all(f"SELECT COUNT(*) AS n FROM audit WHERE action IN ({actions})")
            )
            return int(rows[0]["n"])

        return self.run(read())


async def _seed(hub: Hub) -> tuple[dict[str, str], list[str], list[str]]:
    await hub.accounts.create_project("acme")
    await hub.accounts.create_project("other")
    tokens = {
        "read": await hub.accounts.create_token("acme", "read", "reader-1"),
        "write": await hub.accounts.create_token("acme", "write", "agent-7"),
        "owner": await hub.accounts.create_token("acme", "owner", "olivia"),
    }
    writer = await hub.accounts.authenticate(tokens["write"])
    owner = await hub.accounts.authenticate(tokens["owner"])
    other_writer = await hub.accounts.authenticate(await hub.accounts.create_token("acme", "write", "agent-9"))
    ids = []
    for i, statement in enumerate(
        [
            "Migrations are named YYYYMMDD_description.sql.",
            "The pooler cannot do prepared statements.",
            "Tests live beside the files they test.",
            "We chose SQLite as the embedded default store.",
            "Never run the seed script against production.",
            "Use UTC everywhere in the database.",
        ]
    ):
        principal = writer if i % 2 == 0 else other_writer
        entry, _ = await hub.knowledge.learn(principal, ("fact", "convention", "pitfall", "decision")[i % 4], statement)
        ids.append(entry.id)
    await hub.knowledge.confirm(owner, ids[0])
    await hub.knowledge.confirm(owner, ids[1])
    await hub.knowledge.refute(owner, ids[1], "no longer true after the upgrade")

    proposal = await hub.proposals.propose(writer, "convention", "Branches are named after the issue.", "seen twice")
    return tokens, ids, [proposal.id]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    folder: Path = tmp_path_factory.mktemp("fuzz_api")
    (folder / "checkmaps").mkdir()
    config = Config.from_env(
        {},
        database_url=f"sqlite:///{folder / 'relayroom.db'}",
        checkmaps=str(folder / "checkmaps"),
        allow_insecure_issuers=True,
        sweep_interval=0.0,
    )
    hub = Hub(config, clock=SystemClock())
    with LiveServer(build_app(hub)) as server:
        assert hub.loop is not None
        tokens, ids, proposals = asyncio.run_coroutine_threadsafe(_seed(hub), hub.loop).result(30)
        yield Seeded(server, hub, tokens, ids, proposals)


def header(response: Any, name: str) -> str:
    value = response.headers.get(name) or response.headers.get(name.title()) or ""
    return value[0] if isinstance(value, list) else value


def assert_contract(case: Any, response: Any) -> None:
    """The properties every answer holds, whatever was sent."""
    where = f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
    assert response.status_code < 500, where
    if response.status_code >= 400:
        assert header(response, "content-type").startswith("application/json"), where
        body = response.json()
        assert isinstance(body, dict) and set(body) == {"error"}, where
        error = body["error"]
        assert isinstance(error.get("code"), str) and CODE.match(error["code"]), where
        assert isinstance(error.get("message"), str) and error["message"].strip(), where
        if response.status_code == 429:
            assert header(response, "retry-after").isdigit(), where


def fuzz(seeded: Seeded, level: str) -> int:
    """Run every documented operation with `level`'s token; returns the number of requests sent."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {seeded.tokens[level]}"
    sent = 0
    statuses: dict[tuple[str, int], int] = {}
    failures: list[str] = []
    for result in SCHEMA.get_all_operations():
        operation = result.ok()
        strategies = []
        # Most requests name the seeded project, so they get past the router
        # and the token check into the handlers; the rest go anywhere.
        for mode, fixed in ((POSITIVE, ACME), (POSITIVE, ACME), (NEGATIVE, ACME), (NEGATIVE, ACME), (POSITIVE, None), (NEGATIVE, None)):
            strategies.append(operation.as_strategy(generation_mode=mode, path_parameters=fixed))
        known_ids = st.fixed_dictionaries(
            {
                "entry_id": st.sampled_from(seeded.entry_ids + ["kn_unknown"]),
                "proposal_id": st.sampled_from(seeded.proposal_ids + ["pr_unknown"]),
            }
        )

        @given(case=st.one_of(strategies), known=known_ids, use_known=st.booleans())
        @hypothesis.settings(
            max_examples=EXAMPLES_PER_OPERATION,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any, known: dict[str, str], use_known: bool) -> None:
            nonlocal sent
            for name, value in known.items():
                if use_known and name in (case.path_parameters or {}):
                    case.path_parameters[name] = value
            response = case.call(base_url=seeded.server.url, session=session, timeout=10)
            sent += 1
            statuses[(case.operation.label, response.status_code)] = statuses.get((case.operation.label, response.status_code), 0) + 1
            assert_contract(case, response)
            if case.operation.path.startswith("/v1/"):
                # Every status is one the document gives for the operation,
                # and a success's body has the schema it gives.
                checks = [status_code_conformance]
                if 200 <= response.status_code < 300:
                    checks.append(response_schema_conformance)
                case.validate_response(response, checks=checks)

        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failure, then fail once
            failures.append(f"{operation.label}: {exc}"[:2000])
    for (label, status), count in sorted(statuses.items()):
        print(f"{level:5} {label:70} {status} x{count}")
    assert failures == [], "\n\n".join(failures)
    return sent


@pytest.mark.parametrize("level", ["read", "write", "owner"])
def test_fuzz_every_operation(seeded: Seeded, level: str) -> None:
    trusted_before = seeded.trusted()
    promotions_before = seeded.promotion_rows()
    retires_before = seeded.audit_count("'retire'")
    sent = fuzz(seeded, level)
    assert sent >= 100
    if level in ("read", "write"):
        # Nothing an agent can send makes an entry trusted.
        assert seeded.trusted() <= trusted_before
        assert seeded.promotion_rows() == promotions_before
        # Nor retires one, changes its expiry, or writes a correction that would.
        assert seeded.audit_count("'retire'") == retires_before
