"""What an agent's MCP client sees beyond the four tools, through the SDK's own
client against a live server: the playbook and entries as resources, the
`before_task` prompt, tool annotations a client can auto-approve by, and
refusals as one plain sentence in the gateway's error shape.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp import MCPError

from gateway.knowledge.model import Principal
from tests.conftest import LiveServer, ProjectTokens, live_setup, make_project
from tests.http.test_mcp import acme_live, call, mcp_client, trusted  # noqa: F401  (acme_live is a fixture)

PLAYBOOK = "relayroom://RELAYROOM.md"


def learned_by(server: LiveServer, slug: str, name: str, statement: str) -> str:
    """A candidate written by principal `name` (not confirmed)."""

    async def make(hub: Any) -> str:
        project = await hub.accounts.project(slug)
        entry, _ = await hub.knowledge.learn(Principal(project=project, name=name, level="write"), "fact", statement)
        return entry.id

    return live_setup(server, make)


async def test_the_playbook_is_a_resource_and_matches_the_served_page(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    async with mcp_client(live_server, acme_live.reader) as client:
        listed = (await client.list_resources()).resources
        assert [(r.uri, r.mime_type) for r in listed] == [(PLAYBOOK, "text/markdown")]
        assert listed[0].description
        contents = (await client.read_resource(PLAYBOOK)).contents
    assert len(contents) == 1 and contents[0].mime_type == "text/markdown"
    async with httpx.AsyncClient(base_url=live_server.url) as http:
        page = await http.get("/projects/acme/RELAYROOM.md", headers=acme_live.auth(acme_live.reader))
    assert page.status_code == 200
    assert getattr(contents[0], "text") == page.text and page.text.startswith("# RELAYROOM.md")


async def test_each_project_reads_its_own_playbook(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    other = live_setup(live_server, lambda hub: make_project(hub, "globex"))

    async def set_base(hub: Any) -> None:
        project = await hub.accounts.project("globex")
        await hub.accounts.set_playbook(Principal(project=project, name="o", level="owner"), "# Globex rules\n\nUse tabs.\n")

    live_setup(live_server, set_base)
    async with mcp_client(live_server, other.reader) as client:
        globex = getattr((await client.read_resource(PLAYBOOK)).contents[0], "text")
    async with mcp_client(live_server, acme_live.reader) as client:
        acme = getattr((await client.read_resource(PLAYBOOK)).contents[0], "text")
    assert "Globex rules" in globex and "Globex rules" not in acme


async def test_entries_are_a_resource_template_with_the_rest_visibility(
    live_server: LiveServer, acme_live: ProjectTokens
) -> None:
    entry_id = trusted(live_server, "acme", "Releases are tagged vX.Y.Z.", evidence="RELEASING.md")
    mine = learned_by(live_server, "acme", "agent-7", "The staging database is reset nightly.")
    async with mcp_client(live_server, acme_live.writer) as client:
        templates = (await client.list_resource_templates()).resource_templates
        assert [(t.uri_template, t.mime_type) for t in templates] == [("relayroom://entries/{entry_id}", "application/json")]
        contents = (await client.read_resource(f"relayroom://entries/{entry_id}")).contents
        own = (await client.read_resource(f"relayroom://entries/{mine}")).contents
    import json

    shown = json.loads(getattr(contents[0], "text"))
    assert contents[0].mime_type == "application/json"
    assert shown["id"] == entry_id and shown["state"] == "trusted" and shown["evidence"] == "RELEASING.md"
    assert json.loads(getattr(own[0], "text"))["state"] == "candidate"  # the author sees its own candidate
    async with mcp_client(live_server, acme_live.reader) as client:
        for hidden in (mine, "kn_nope"):  # another's candidate is as absent as an unknown id
            with pytest.raises(MCPError) as refused:
                await client.read_resource(f"relayroom://entries/{hidden}")
            assert refused.value.error.code == -32002
            data = refused.value.error.data
            assert data["error"]["code"] == "entry_not_found" and data["uri"].endswith(hidden)
    other = live_setup(live_server, lambda hub: make_project(hub, "globex"))
    async with mcp_client(live_server, other.owner) as client:
        with pytest.raises(MCPError):
            await client.read_resource(f"relayroom://entries/{entry_id}")  # not even an owner of another project


async def test_the_before_task_prompt_recalls_and_its_recall_id_counts_uses(
    live_server: LiveServer, acme_live: ProjectTokens
) -> None:
    entry_id = trusted(live_server, "acme", "Database migrations are named YYYYMMDD_description.sql.")
    async with mcp_client(live_server, acme_live.reader) as client:
        prompts = (await client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["before_task"]
        assert [(a.name, a.required) for a in prompts[0].arguments or []] == [("task", True)]
        got = await client.get_prompt("before_task", {"task": "add a database migration for the orders table"})
        text = getattr(got.messages[0].content, "text")
        assert got.messages[0].role == "user"
        assert entry_id in text and "YYYYMMDD_description.sql" in text
        recall_id = next(word for word in text.replace(")", " ").split() if word.startswith("rc_"))
        assert await call(client, "recall_used", recall_id=recall_id, entry_id=entry_id) == {"ok": True}
        empty = await client.get_prompt("before_task", {"task": "paint the bikeshed"})
        assert "no trusted knowledge" in getattr(empty.messages[0].content, "text")
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("before_task", {})
        assert refused.value.error.code == -32602
        assert refused.value.error.data == {"error": {"code": "invalid_argument", "message": "task is required."}}
        with pytest.raises(MCPError) as unknown:
            await client.get_prompt("after_task", {"task": "x"})
        assert unknown.value.error.data["error"]["code"] == "unknown_prompt"


async def test_annotations_let_a_client_auto_approve_the_harmless_tools(
    live_server: LiveServer, acme_live: ProjectTokens
) -> None:
    async with mcp_client(live_server, acme_live.reader) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    hints = {
        name: (t.annotations.read_only_hint, t.annotations.destructive_hint, t.annotations.open_world_hint)
        for name, t in tools.items()
        if t.annotations is not None
    }
    assert hints == {
        "recall": (True, None, False),
        "learn": (False, False, False),
        "recall_used": (False, False, False),
        "report_error": (False, True, False),
    }
    assert all(tool.title for tool in tools.values())
    assert "recall first" in (tools["learn"].description or "").lower()
    # recall's schema is published flat (a client validates every answer against it; see tools.flat_schema)
    import json

    flat = json.dumps(tools["recall"].output_schema)
    assert "$ref" not in flat and "anyOf" not in flat
    entry = tools["recall"].output_schema["properties"]["entries"]["items"]  # type: ignore[index]
    assert entry["properties"]["evidence"]["type"] == ["string", "null"] and "kind" in entry["required"]
    effect = tools["report_error"].output_schema["properties"]["effect"]  # type: ignore[index]
    assert "none" in effect["description"] and "changed no entry" in effect["description"]


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("recall", {"query": "x", "kind": "rumour"}, "kind must be one of fact, convention, pitfall or decision, not 'rumour'."),
        ("recall", {"query": "x", "limit": 51}, "limit must be at most 50, not 51."),
        ("recall", {}, "query is required."),
        ("recall", {"query": 5, "limit": "many"}, "query must be a string; limit must be a whole number."),
        ("learn", {"kind": "fact", "statement": ""}, "statement must not be empty."),
        ("learn", {"kind": "fact", "statement": "s", "ttl_days": -1}, "ttl_days must be greater than 0, not -1."),
    ],
)
async def test_bad_arguments_are_one_plain_sentence_in_the_error_shape(
    live_server: LiveServer, acme_live: ProjectTokens, tool: str, arguments: dict[str, Any], message: str
) -> None:
    async with mcp_client(live_server, acme_live.writer) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and result.structured_content is None  # an error is not a result of the output schema
    assert result.meta is not None and result.meta["relayroom/error"] == {"code": "invalid_argument", "message": message}
    assert [getattr(block, "text") for block in result.content] == [f"invalid_argument: {message}"]


async def test_every_refusal_carries_its_code_in_the_error_shape(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    async with mcp_client(live_server, acme_live.reader) as client:
        level = await client.call_tool("learn", {"kind": "fact", "statement": "Readers cannot write."})
        unknown = await client.call_tool("forget", {"entry_id": "kn_x"})
    assert level.is_error and level.meta is not None
    assert level.meta["relayroom/error"]["code"] == "insufficient_level"
    assert "write token" in level.meta["relayroom/error"]["message"]
    assert getattr(level.content[0], "text").startswith("insufficient_level: ")
    assert unknown.meta is not None and unknown.meta["relayroom/error"] == {
        "code": "unknown_tool",
        "message": "there is no tool 'forget'; the tools are learn, recall, recall_used and report_error.",
    }


HOSTILE_URIS = [
    "relayroom://entries/../../etc/passwd", "relayroom://entries/%2e%2e", "relayroom://entries/\x00",
    "relayroom://entries/kn_a/b", "file:///etc/passwd", "relayroom://RELAYROOM.md?x=1", "", "relayroom://entries/" + "x" * 5000,
]


async def test_hostile_resource_uris_and_prompt_arguments_are_json_rpc_errors(
    client: httpx.AsyncClient, acme: ProjectTokens, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {**acme.auth(acme.reader), "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    codes = []
    for uri in HOSTILE_URIS:
        response = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri}},
                                     headers=headers)
        assert response.status_code == 200, (uri, response.text)
        error = response.json()["error"]
        assert error["code"] == -32002, (uri, error)
        codes.append(error["data"]["error"]["code"])
        assert len(error["message"]) < 300  # nothing sent is echoed back at length
    assert set(codes) == {"resource_not_found", "entry_not_found"}
    for arguments in ({"task": 5}, {"task": None}, {"task": "x", "extra": "y"}, None, "text"):
        response = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "before_task", "arguments": arguments}},
            headers=headers,
        )
        assert response.status_code == 200 and isinstance(response.json()["error"]["code"], int), (arguments, response.text)
    assert [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")] == []
