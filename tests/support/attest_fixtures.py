"""Fixtures and helpers shared by the CI attestation tests: real OIDC
issuers on 127.0.0.1, check maps written into the hub's folder, entries to
support, and row counts that show whether anything was recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from gateway.knowledge.model import Principal
from tests.support.oidc_issuer import OidcIssuer

TABLES = ("attestations", "supports", "seen_tokens", "webhook_deliveries", "audit")


@pytest.fixture
def issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as running:
        yield running


@pytest.fixture
def gitlab_issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as running:
        yield running


async def learn(hub: Any, project: str, statement: str, principal: str = "agent-7") -> str:
    project_row = await hub.accounts.project(project)
    entry, _ = await hub.knowledge.learn(Principal(project_row, principal, "write"), "convention", statement)
    return entry.id


async def write_map(hub: Any, folder: Path, name: str, text: str) -> Any:
    """Write a check map and load it as the gateway would; returns the registry."""
    (folder / name).write_text(text)
    registry = hub.checkmaps
    await registry.refresh(hub.driver)
    return registry


async def counts(hub: Any) -> dict[str, int]:
    async def unit(q: Any) -> dict[str, int]:
        return {table: await q.count_rows(table) for table in TABLES}

    return await hub.driver.read(unit)


def github_binding(issuer_url: str, *, refs: str = "[refs/heads/main]", extra: str = "") -> str:
    return f"""
  - provider: github-actions
    issuer: {issuer_url}
    repository: acme/api
    repository_id: "123456"
    repository_owner_id: "7890"
    refs: {refs}
{extra}"""


def gitlab_binding(issuer_url: str, *, refs: str = "[main]", extra: str = "") -> str:
    return f"""
  - provider: gitlab
    issuer: {issuer_url}
    project_path: acme/api
    project_id: "42"
    refs: {refs}
{extra}"""


def checkmap(project: str, bindings: str, checks: dict[str, list[str]], check_extra: dict[str, str] | None = None) -> str:
    lines = [f"project: {project}", "issuers:" + bindings.rstrip(), "checks:"]
    for name, ids in checks.items():
        lines.append(f"  {name}:")
        lines.append(f"    supports: [{', '.join(ids)}]")
        if check_extra and name in check_extra:
            lines.append(f"    {check_extra[name]}")
    return "\n".join(lines) + "\n"
