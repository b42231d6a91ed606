"""A real external MCP client: the MCP Inspector's CLI mode (Node) against the
live gateway, listing the tools and calling recall with a bearer header.

`scripts/test` installs Node 22 and `@modelcontextprotocol/inspector` into
`.ci-work/` and sets RELAYROOM_TEST_NODE_BIN and RELAYROOM_TEST_INSPECTOR.
Without them the test skips, unless RELAYROOM_REQUIRE_INSPECTOR=1 (then a
missing Inspector is a failure).
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from gateway.knowledge.model import Principal
from tests.conftest import LiveServer, ProjectTokens, live_setup, make_project


def inspector() -> tuple[str, dict[str, str]]:
    binary = os.environ.get("RELAYROOM_TEST_INSPECTOR")
    node_bin = os.environ.get("RELAYROOM_TEST_NODE_BIN")
    if not binary or not node_bin or not os.path.exists(binary):
        message = "MCP Inspector not installed: set RELAYROOM_TEST_INSPECTOR and RELAYROOM_TEST_NODE_BIN (scripts/test does)"
        if os.environ.get("RELAYROOM_REQUIRE_INSPECTOR") == "1":
            pytest.fail(message)
        pytest.skip(message)
    env = dict(os.environ)
    env["PATH"] = f"{node_bin}{os.pathsep}{env.get('PATH', '')}"
    return binary, env


def run_inspector(server: LiveServer, token: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    binary, env = inspector()
    argv = [binary, "--cli", f"{server.url}/mcp", "--transport", "http"]
    if token is not None:
        argv += ["--header", f"Authorization: Bearer {token}"]
    return subprocess.run(argv + list(args), capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_inspector_lists_tools_and_calls_recall(live_server: LiveServer) -> None:
    inspector()  # skip before any setup when it is not installed
    tokens: ProjectTokens = live_setup(live_server, lambda hub: make_project(hub, "acme"))

    async def seed(hub: Any) -> str:
        project = await hub.accounts.project("acme")
        owner = Principal(project=project, name="olivia", level="owner")
        entry, _ = await hub.knowledge.learn(owner, "convention", "Migrations are named YYYYMMDD_description.sql.")
        await hub.knowledge.confirm(owner, entry.id)
        return entry.id

    entry_id = live_setup(live_server, seed)

    listed = run_inspector(live_server, tokens.reader, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = {tool["name"]: tool for tool in json.loads(listed.stdout)["tools"]}
    assert set(tools) == {"recall", "learn", "recall_used", "report_error"}
    assert tools["recall"]["inputSchema"]["required"] == ["query"]
    assert "outputSchema" in tools["recall"]

    called = run_inspector(
        live_server, tokens.reader, "--method", "tools/call", "--tool-name", "recall",
        "--tool-arg", "query=how do I name a migration?", "--tool-arg", "limit=3",
    )
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)
    assert result["isError"] is False
    assert [e["id"] for e in result["structuredContent"]["entries"]] == [entry_id]

    refused = run_inspector(
        live_server, tokens.reader, "--method", "tools/call", "--tool-name", "learn",
        "--tool-arg", "kind=fact", "--tool-arg", "statement=Readers cannot write.",
    )
    assert refused.returncode != 0
    assert "needs a write token" in refused.stdout

    anonymous = run_inspector(live_server, None, "--method", "tools/list")
    assert anonymous.returncode != 0
