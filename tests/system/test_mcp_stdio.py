"""`relayroom mcp`, as a stdio-only MCP client launches it: the SDK's stdio
client spawns the command with RELAYROOM_URL and RELAYROOM_TOKEN, and every
tool, resource and prompt answers what the live gateway answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters

from tests.conftest import LiveServer, ProjectTokens, free_port, live_setup, make_project
from tests.http.test_mcp import trusted

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the bridge is the same on any store


def _env(url: str, token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env["RELAYROOM_URL"] = url
    if token is not None:
        env["RELAYROOM_TOKEN"] = token
    return env


def stdio(url: str, token: str | None) -> Client:
    params = StdioServerParameters(command=sys.executable, args=["-m", "gateway", "mcp"], env=_env(url, token))
    return Client(params)


@pytest.fixture
def acme_live(live_server: LiveServer) -> ProjectTokens:
    return live_setup(live_server, lambda hub: make_project(hub, "acme"))


@SQLITE
async def test_tools_resources_and_prompts_through_stdio(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    entry_id = trusted(live_server, "acme", "Database migrations are named YYYYMMDD_description.sql.")
    async with stdio(live_server.url, acme_live.writer) as client:
        assert client.server_info is not None and client.server_info.name == "relayroom"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"recall", "learn", "recall_used", "report_error"}
        assert tools["recall"].annotations is not None and tools["recall"].annotations.read_only_hint is True

        answer = await client.call_tool("recall", {"query": "how do I name a database migration?"})
        assert not answer.is_error and answer.structured_content is not None
        assert [e["id"] for e in answer.structured_content["entries"]] == [entry_id]
        used = await client.call_tool("recall_used", {"recall_id": answer.structured_content["recall_id"], "entry_id": entry_id})
        assert used.structured_content == {"ok": True}
        learned = await client.call_tool("learn", {"kind": "pitfall", "statement": "The pooler cannot do prepared statements."})
        assert learned.structured_content is not None and learned.structured_content["state"] == "candidate"
        bad = await client.call_tool("recall", {"query": "x", "limit": 51})
        assert bad.is_error and bad.meta is not None
        assert bad.meta["relayroom/error"] == {"code": "invalid_argument", "message": "limit must be at most 50, not 51."}

        playbook = (await client.read_resource("relayroom://RELAYROOM.md")).contents[0]
        assert getattr(playbook, "text").startswith("# RELAYROOM.md")
        with pytest.raises(MCPError) as missing:
            await client.read_resource("relayroom://entries/kn_nope")
        assert missing.value.error.data["error"]["code"] == "entry_not_found"
        prompt = await client.get_prompt("before_task", {"task": "add a database migration"})
        assert entry_id in getattr(prompt.messages[0].content, "text")

    async def learned_by(hub: Any) -> list[str]:
        rows = await hub.driver.read(lambda q: q.tx.all("SELECT created_by, created_via FROM entries WHERE state = 'candidate'"))
        return [f"{r['created_by']}/{r['created_via']}" for r in rows]

    assert live_setup(live_server, learned_by) == ["agent-7/learn"]  # the gateway wrote it, as agent-7


@SQLITE
async def test_a_reader_is_refused_what_it_may_not_do_through_stdio(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    async with stdio(live_server.url, acme_live.reader) as client:
        refused = await client.call_tool("learn", {"kind": "fact", "statement": "Readers cannot write."})
    assert refused.is_error and refused.meta is not None
    assert refused.meta["relayroom/error"]["code"] == "insufficient_level"


def run_bridge(url: str, token: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "mcp"], env=_env(url, token), capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )


@SQLITE
def test_a_wrong_token_url_or_none_is_one_line_and_exit_1(live_server: LiveServer) -> None:
    for url, token, reason in (
        (live_server.url, "rr_not-a-token", "refused RELAYROOM_TOKEN"),
        (f"http://127.0.0.1:{free_port()}", "rr_whatever", "cannot reach the gateway"),
        (live_server.url, None, "set RELAYROOM_TOKEN"),
    ):
        done = run_bridge(url, token)
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""  # stdout is the protocol's alone
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("relayroom: ") and reason in last, done.stderr
        assert "Traceback" not in done.stderr
        if token:
            assert token not in done.stderr


@SQLITE
async def test_a_gateway_that_goes_away_is_a_readable_error_not_a_dead_bridge(
    live_server: LiveServer, acme_live: ProjectTokens
) -> None:
    from tests.support.bearer_proxy import BearerProxy

    proxy = BearerProxy(live_server.url, acme_live.reader).__enter__()
    try:
        async with stdio(proxy.url, acme_live.reader) as client:
            assert not (await client.call_tool("recall", {"query": "anything"})).is_error
            proxy.__exit__(None, None, None)  # the gateway's address stops answering
            gone = await client.call_tool("recall", {"query": "anything"})
            assert gone.is_error and gone.meta is not None
            assert gone.meta["relayroom/error"]["code"] == "gateway_unreachable"
            assert getattr(gone.content[0], "text").startswith("gateway_unreachable: cannot reach the gateway")
            with pytest.raises(MCPError) as refused:
                await client.read_resource("relayroom://RELAYROOM.md")
            assert refused.value.error.data["error"]["code"] == "gateway_unreachable"
            # The gateway is back at the same address: the bridge connects again by itself.
            proxy = BearerProxy(live_server.url, acme_live.reader, port=proxy.port).__enter__()
            assert not (await client.call_tool("recall", {"query": "anything"})).is_error
    finally:
        proxy.__exit__(None, None, None)


@SQLITE
async def test_a_url_ending_in_mcp_names_the_same_gateway(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    async with stdio(f"{live_server.url}/mcp", acme_live.reader) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} >= {"recall", "learn"}
