"""The MCP door through the SDK's own client, against a real uvicorn server.

Everything goes over HTTP on 127.0.0.1 with a project token as the bearer
credential, exactly as an agent's MCP client would do it.  Setup that an
agent cannot do (an owner's confirm, an expiry in the past) goes through the
hub on the server's own loop (`live_setup`).
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.knowledge.model import Principal
from tests.conftest import LiveServer, ProjectTokens, live_setup, make_project
from tests.support.helpers import snapshot

TOOLS = {"recall", "learn", "recall_used", "report_error"}


@contextlib.asynccontextmanager
async def mcp_client(server: LiveServer, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=20)
    async with http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


@pytest.fixture
def acme_live(live_server: LiveServer) -> ProjectTokens:
    return live_setup(live_server, lambda hub: make_project(hub, "acme"))


def trusted(server: LiveServer, slug: str, statement: str, kind: str = "convention", **extra: Any) -> str:
    """An entry confirmed by the project's owner: trusted, in recall."""

    async def make(hub: Any) -> str:
        project = await hub.accounts.project(slug)
        owner = Principal(project=project, name="olivia", level="owner")
        entry, _ = await hub.knowledge.learn(owner, kind, statement, extra.get("evidence"), expires_at=extra.get("expires_at"))
        await hub.knowledge.confirm(owner, entry.id)
        return entry.id

    return live_setup(server, make)


def state_of(server: LiveServer, slug: str, entry_id: str) -> str:
    async def read(hub: Any) -> str:
        project = await hub.accounts.project(slug)
        entry = await hub.driver.read(lambda q: q.entry(project.id, entry_id))
        return entry.effective_state(hub.clock.now())

    return live_setup(server, read)


async def test_tools_are_listed_with_input_and_output_schemas(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    async with mcp_client(live_server, acme_live.reader) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        assert tool.description and len(tool.description) > 80, tool.name  # says when to call it
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
    recall = listed["recall"].input_schema
    assert recall["required"] == ["query"]
    assert recall["properties"]["limit"]["maximum"] == 50 and recall["properties"]["limit"]["minimum"] == 1
    assert set(listed["learn"].input_schema["required"]) == {"kind", "statement"}
    kind_schema = listed["learn"].input_schema["properties"]["kind"]
    assert set(kind_schema["enum"]) == {"fact", "convention", "pitfall", "decision"}
    assert set(listed["recall_used"].input_schema["required"]) == {"recall_id", "entry_id"}
    assert set(listed["report_error"].input_schema["required"]) == {"contradicts", "detail"}
    assert {"recall_id", "entries"} <= set(listed["recall"].output_schema["properties"])
    assert {"id", "state", "duplicate"} <= set(listed["learn"].output_schema["properties"])
    assert {"event_id", "effect"} <= set(listed["report_error"].output_schema["properties"])


async def test_recall_returns_only_trusted_unexpired_entries_as_structured_content(
    live_server: LiveServer, acme_live: ProjectTokens
) -> None:
    kept = trusted(live_server, "acme", "Database migrations are named YYYYMMDD_description.sql.", evidence="db/migrations/")
    soon = trusted(live_server, "acme", "Migrations run in the staging database on every merge.")

    async def expire(hub: Any) -> None:  # its expiry passes: recall drops it at that instant
        await hub.driver.write(lambda q: q.tx.run("UPDATE entries SET expires_at = ? WHERE id = ?", hub.clock.now() - 1, soon))

    live_setup(live_server, expire)
    async with mcp_client(live_server, acme_live.writer) as client:
        await call(client, "learn", kind="convention", statement="Migrations are named with a ticket number.")
        answer = await call(client, "recall", query="how do I name a database migration?")
    assert [e["id"] for e in answer["entries"]] == [kept]
    entry = answer["entries"][0]
    assert entry["kind"] == "convention" and entry["statement"].startswith("Database migrations")
    assert entry["score"] > 0 and entry["trusted_since"].endswith("Z")
    assert entry["issuers"] == ["owner:olivia"]  # who confirmed it: an owner vouches too
    assert answer["recall_id"].startswith("rc")


async def test_a_candidate_is_invisible_to_other_principals_recall(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    async with mcp_client(live_server, acme_live.writer) as author:
        learned = await call(author, "learn", kind="pitfall", statement="The pooler cannot do prepared statements.",
                             evidence="pgbouncer transaction mode")
        assert learned["state"] == "candidate" and learned["duplicate"] is False
        again = await call(author, "learn", kind="pitfall", statement="the pooler  cannot do prepared statements.")
        assert again == {"id": learned["id"], "state": "candidate", "duplicate": True}
    async with mcp_client(live_server, acme_live.other_writer) as other:
        assert (await call(other, "recall", query="pooler prepared statements"))["entries"] == []
    async with mcp_client(live_server, acme_live.reader) as reader:
        assert (await call(reader, "recall", query="pooler prepared statements"))["entries"] == []


async def test_recall_used_only_for_an_entry_recall_returned_to_that_principal(
    live_server: LiveServer, acme_live: ProjectTokens
) -> None:
    returned = trusted(live_server, "acme", "The HTTP client retries idempotent requests three times.")
    other = trusted(live_server, "acme", "Feature flags live in flags.yaml.")
    async with mcp_client(live_server, acme_live.reader) as reader:
        answer = await call(reader, "recall", query="does the http client retry?")
        assert [e["id"] for e in answer["entries"]] == [returned]
        assert await call(reader, "recall_used", recall_id=answer["recall_id"], entry_id=returned) == {"ok": True}
        assert await call(reader, "recall_used", recall_id=answer["recall_id"], entry_id=returned) == {"ok": True}
        assert "recall_not_found" in await call_error(reader, "recall_used", recall_id=answer["recall_id"], entry_id=other)
        assert "recall_not_found" in await call_error(reader, "recall_used", recall_id="rc_unknown", entry_id=returned)
    async with mcp_client(live_server, acme_live.writer) as someone_else:
        text = await call_error(someone_else, "recall_used", recall_id=answer["recall_id"], entry_id=returned)
        assert "recall_not_found" in text

    async def uses(hub: Any) -> int:
        return await hub.driver.read(lambda q: q.count_rows("recall_uses"))

    assert live_setup(live_server, uses) == 1  # the pair counted once


async def test_report_error_demotes_at_once(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    entry_id = trusted(live_server, "acme", "Deploys are frozen on Fridays.", kind="decision")
    async with mcp_client(live_server, acme_live.writer) as client:
        first = await call(client, "recall", query="can I deploy on friday?")
        assert [e["id"] for e in first["entries"]] == [entry_id]
        report = await call(client, "report_error", contradicts=entry_id, detail="Deployed on Friday 2026-11-27 by policy v2.")
        assert report["effect"] == "contradicted" and report["event_id"]
        assert (await call(client, "recall", query="can I deploy on friday?"))["entries"] == []
        assert (await call(client, "report_error", contradicts=entry_id, detail="again"))["effect"] == "duplicate"
        assert "entry_not_found" in await call_error(client, "report_error", contradicts="kn_nope", detail="x")
    assert state_of(live_server, "acme", entry_id) == "contradicted"


async def test_each_level_is_refused_what_it_may_not_do(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    entry_id = trusted(live_server, "acme", "Releases are tagged vX.Y.Z.")
    async with mcp_client(live_server, acme_live.reader) as reader:
        text = await call_error(reader, "learn", kind="fact", statement="Readers cannot write.")
        assert "insufficient_level" in text and "write token" in text and "this token is read" in text
        text = await call_error(reader, "report_error", contradicts=entry_id, detail="no")
        assert "insufficient_level" in text and "write token" in text
        answer = await call(reader, "recall", query="release tags")  # read may recall ...
        assert await call(reader, "recall_used", recall_id=answer["recall_id"], entry_id=entry_id) == {"ok": True}
    assert state_of(live_server, "acme", entry_id) == "trusted"  # ... and the refusals changed nothing
    for token in (acme_live.writer, acme_live.owner):
        async with mcp_client(live_server, token) as client:
            learned = await call(client, "learn", kind="fact", statement=f"Written with the {token[:4]} token.")
            assert learned["state"] == "candidate"  # no level makes an entry trusted through learn
    async with mcp_client(live_server, acme_live.writer) as writer:
        assert (await call(writer, "report_error", contradicts=entry_id, detail="tags are X.Y.Z"))["effect"] == "contradicted"


async def test_bad_arguments_are_tool_errors_not_crashes(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    async with mcp_client(live_server, acme_live.writer) as client:
        assert "kind" in await call_error(client, "recall", query="x", kind="rumour")
        assert "limit" in await call_error(client, "recall", query="x", limit=51)
        assert "statement" in await call_error(client, "learn", kind="fact", statement="")
        assert "ttl_days" in await call_error(client, "learn", kind="fact", statement="s", ttl_days=-1)
        # hostile query text is just text
        answer = await call(client, "recall", query='" OR * NEAR( \x00 \U0001f600 ' + "x" * 1900)
        assert answer["entries"] == []


async def test_an_argument_a_tool_does_not_take_is_a_tool_error_and_changes_nothing(
    live_server: LiveServer, acme_live: ProjectTokens
) -> None:
    entry_id = trusted(live_server, "acme", "Migrations are named by date.")
    before = live_setup(live_server, snapshot)
    calls = [
        ("learn", {"kind": "fact", "statement": "Agents may promote.", "state": "trusted"}, "'state'"),
        ("learn", {"kind": "fact", "statement": "Gone stale soon.", "ttl_day": 3}, "'ttl_day'"),
        ("learn", {"kind": "fact", "statement": "Two typos.", "evidance": "x", "promoted_by": "owner:olivia"},
         "'evidance' or 'promoted_by'"),
        ("recall", {"query": "migrations", "project": "other"}, "'project'"),
        ("recall_used", {"recall_id": "rc_x", "entry_id": entry_id, "count": 50}, "'count'"),
        ("report_error", {"contradicts": entry_id, "detail": "wrong", "effect": "none"}, "'effect'"),
    ]
    async with mcp_client(live_server, acme_live.writer) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        for tool, arguments, named in calls:
            result = await client.call_tool(tool, arguments)
            assert result.is_error, (tool, arguments)
            error = (result.meta or {})["relayroom/error"]
            assert error["code"] == "unknown_argument", error
            assert f"{tool} takes no argument {named}" in error["message"], error["message"]
    assert live_setup(live_server, snapshot) == before
    assert state_of(live_server, "acme", entry_id) == "trusted"
    # The published schemas say so too, for a client that checks before calling.
    assert all(tool.input_schema.get("additionalProperties") is False for tool in listed.values())


async def test_a_token_of_another_project_sees_nothing_of_this_one(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    trusted(live_server, "acme", "Acme builds with Bazel.")
    other = live_setup(live_server, lambda hub: make_project(hub, "globex"))
    async with mcp_client(live_server, other.reader) as client:
        assert (await call(client, "recall", query="bazel build"))["entries"] == []


@pytest.mark.parametrize("header", [None, "Bearer not-a-token", "Basic Zm9vOmJhcg=="])
async def test_no_or_bad_token_is_http_401_with_the_contract_body(
    live_server: LiveServer, acme_live: ProjectTokens, header: str | None
) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if header:
        headers["Authorization"] = header
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(base_url=live_server.url) as http:
        response = await http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].lower().startswith("bearer")
    error = response.json()["error"]
    assert set(error) == {"code", "message"}
    assert error["code"] == ("missing_credential" if header is None else "invalid_token")


async def test_the_sdk_client_without_a_token_fails_to_connect(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    with pytest.raises(BaseException):  # the SDK raises an ExceptionGroup around the 401
        async with mcp_client(live_server, None) as client:
            await client.list_tools()


async def test_host_and_origin_checks_accept_the_public_hosts_and_refuse_others(hub: Any, acme: ProjectTokens) -> None:
    import dataclasses

    from gateway.web.app import build_app

    hub.config = dataclasses.replace(hub.config, public_hosts=("knowledge.example.com", "kb.internal:8443"))
    app = build_app(hub, manage_hub=False)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    base = {
        "Authorization": f"Bearer {acme.reader}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    cases = [
        ({"Host": "knowledge.example.com"}, 200, None),
        ({"Host": "knowledge.example.com:443", "Origin": "https://knowledge.example.com"}, 200, None),
        ({"Host": "kb.internal:8443"}, 200, None),
        ({"Host": "127.0.0.1:8750", "Origin": "http://localhost:3000"}, 200, None),
        ({"Host": "kb.internal:9999"}, 421, "misdirected_host"),
        ({"Host": "evil.example"}, 421, "misdirected_host"),
        ({"Host": "knowledge.example.com", "Origin": "https://evil.example"}, 403, "forbidden_origin"),
    ]
    async with app.state.session_manager.run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8750") as http:
            for headers, status, code in cases:
                response = await http.post("/mcp", json=body, headers={**base, **headers})
                assert response.status_code == status, (headers, response.text)
                if code is None:
                    assert {t["name"] for t in response.json()["result"]["tools"]} >= {"recall"}
                else:
                    assert response.json() == {"error": {"code": code, "message": response.json()["error"]["message"]}}


def test_allowed_hosts_without_public_hosts_are_loopback_only() -> None:
    from gateway.mcp.server import allowed_hosts_and_origins

    hosts, origins = allowed_hosts_and_origins(())
    assert set(hosts) == {"127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"}
    assert all("127.0.0.1" in o or "localhost" in o or "[::1]" in o for o in origins)


async def test_sdk_refusals_carry_the_contract_error_body(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    headers = {
        "Authorization": f"Bearer {acme.reader}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "recall", "arguments": {"query": "x" * (70 * 1024)}}}
    too_large = await client.post("/mcp", json=big, headers=headers)
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "body_too_large"
    wrong_type = await client.post("/mcp", content=b"{}", headers={**headers, "Content-Type": "text/plain"})
    assert wrong_type.status_code in (400, 415) and set(wrong_type.json()["error"]) == {"code", "message"}
    # a JSON-RPC error stays a JSON-RPC error
    unknown = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "no/such"}, headers=headers)
    assert "jsonrpc" in unknown.json() and unknown.json().get("id") == 7


async def test_the_server_tells_its_name_and_version(live_server: LiveServer, acme_live: ProjectTokens) -> None:
    from gateway import __version__

    async with mcp_client(live_server, acme_live.reader) as client:
        info = client.server_info
    assert info is not None and info.name == "relayroom" and info.version == __version__ != ""
