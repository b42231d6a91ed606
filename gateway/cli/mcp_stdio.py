"""`relayroom mcp`: the gateway's MCP server for clients that only speak stdio.

    RELAYROOM_URL    the gateway's base URL (default http://127.0.0.1:8750; one
                     ending in /mcp is taken as the gateway it belongs to)
    RELAYROOM_TOKEN  a project token (read, write or owner)

    {"mcpServers": {"relayroom": {"command": "relayroom", "args": ["mcp"],
                                  "env": {"RELAYROOM_URL": "...", "RELAYROOM_TOKEN": "..."}}}}

A bridge, not a second server: it speaks MCP on stdin/stdout with the
official SDK's stdio transport and forwards every request (tools, resources,
prompts) to the gateway's `/mcp` with the token as the bearer credential,
answering with whatever the gateway answered.  So the trust rule, the levels
and the error bodies are the gateway's, and nothing is kept here: the
process opens no store and holds no state but one HTTP connection.

It connects once before serving, so a wrong URL or token is one line on
stderr and exit status 1, not a client that starts and then fails every
call.  If the gateway goes away later, each request answers
`gateway_unreachable` (a tool error for a tool call) until it is back; the
bridge connects again by itself.  The token is read from the environment only (never a flag, so it does
not show in `ps`).  stdout carries only the protocol; anything to say goes
to stderr.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

import anyio
import anyio.abc
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    TextContent,
)

from gateway.cli.client import DEFAULT_URL, base_url, token_from_env
from gateway.cli.main import CommandError

if TYPE_CHECKING:
    from gateway.cli.main import Subcommands

TIMEOUT = 30.0
INTERNAL_ERROR = -32603
CONNECTION_CLOSED = -32000  # the SDK client's own code when the connection under a request broke

T = TypeVar("T")


class Unreachable(Exception):
    """The gateway did not answer (down, or the connection broke)."""


class Upstream:
    """One MCP connection to the gateway, kept in its own task.

    The SDK client's connection lives in a task group: when the gateway goes
    away, that group fails and cancels whatever entered it.  Entered in a
    keeper task of its own, only the keeper ends; the bridge answers
    `gateway_unreachable` and connects again at the next request, so a
    gateway restart does not need a client restart."""

    def __init__(self, endpoint: str, token: str, tasks: anyio.abc.TaskGroup) -> None:
        self.endpoint = endpoint
        self.token = token
        self.tasks = tasks
        self.client: Client | None = None
        self._stop = anyio.Event()

    async def connect(self) -> Client:
        if self.client is None:
            await self.tasks.start(self._keep)
        assert self.client is not None
        return self.client

    async def _keep(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            http = httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {self.token}", "User-Agent": "relayroom-mcp-stdio"}, timeout=TIMEOUT
            )
            async with http, Client(streamable_http_client(self.endpoint, http_client=http)) as client:
                self.client = client
                started = True
                task_status.started()
                await self._stop.wait()
        except Exception:
            if not started:
                raise  # the first connection's failure is the caller's to report
        finally:
            self.client = None

    async def ask(self, request: Callable[[Client], Awaitable[T]]) -> T:
        """The gateway's answer; its JSON-RPC errors pass through as they are."""
        try:
            client = await self.connect()
        except Exception as exc:
            raise Unreachable(_reason(exc)) from None
        try:
            return await request(client)
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                raise Unreachable("the connection to the gateway closed") from None
            raise
        except Exception as exc:
            raise Unreachable(_reason(exc)) from None

    def close(self) -> None:
        self._stop.set()


def _unreachable(exc: Unreachable) -> MCPError:
    message = f"cannot reach the gateway: {exc}"
    return MCPError(code=INTERNAL_ERROR, message=message, data={"error": {"code": "gateway_unreachable", "message": message}})


def bridge(upstream: Upstream, first: Client) -> Server[Any]:
    """A stdio-side server whose every handler asks the gateway."""
    info = first.server_info

    async def ask(request: Callable[[Client], Awaitable[T]]) -> T:
        try:
            return await upstream.ask(request)
        except Unreachable as exc:
            raise _unreachable(exc) from None

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        listed = await ask(lambda c: c.list_tools(cursor=params.cursor if params else None))
        return ListToolsResult(tools=listed.tools, next_cursor=listed.next_cursor)

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        try:
            result = await upstream.ask(lambda c: c.call_tool(params.name, params.arguments or {}))
        except Unreachable as exc:  # the agent reads why, as a tool error
            message = f"cannot reach the gateway: {exc}"
            return CallToolResult(
                content=[TextContent(type="text", text=f"gateway_unreachable: {message}")],
                is_error=True,
                _meta={"relayroom/error": {"code": "gateway_unreachable", "message": message}},
            )
        return CallToolResult(
            content=result.content,
            structured_content=result.structured_content,
            is_error=result.is_error,
            _meta={k: v for k, v in (result.meta or {}).items() if k.startswith("relayroom/")} or None,
        )

    async def list_resources(ctx: Any, params: PaginatedRequestParams | None) -> ListResourcesResult:
        listed = await ask(lambda c: c.list_resources(cursor=params.cursor if params else None))
        return ListResourcesResult(resources=listed.resources, next_cursor=listed.next_cursor)

    async def list_templates(ctx: Any, params: PaginatedRequestParams | None) -> ListResourceTemplatesResult:
        listed = await ask(lambda c: c.list_resource_templates(cursor=params.cursor if params else None))
        return ListResourceTemplatesResult(resource_templates=listed.resource_templates, next_cursor=listed.next_cursor)

    async def read_resource(ctx: Any, params: ReadResourceRequestParams) -> ReadResourceResult:
        read = await ask(lambda c: c.read_resource(str(params.uri)))
        return ReadResourceResult(contents=read.contents)

    async def list_prompts(ctx: Any, params: PaginatedRequestParams | None) -> ListPromptsResult:
        listed = await ask(lambda c: c.list_prompts(cursor=params.cursor if params else None))
        return ListPromptsResult(prompts=listed.prompts, next_cursor=listed.next_cursor)

    async def get_prompt(ctx: Any, params: GetPromptRequestParams) -> GetPromptResult:
        got = await ask(lambda c: c.get_prompt(params.name, params.arguments))
        return GetPromptResult(description=got.description, messages=got.messages)

    return Server(
        info.name if info else "relayroom",
        version=info.version if info else "",
        title=info.title if info else None,
        instructions=first.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def _reason(exc: BaseException) -> str:
    # The SDK wraps transport failures in exception groups; the innermost says why.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


async def serve(url: str, token: str) -> None:
    endpoint = url.rstrip("/") + "/mcp"
    failed: Exception | None = None
    async with anyio.create_task_group() as tasks:
        upstream = Upstream(endpoint, token, tasks)
        try:
            first = await upstream.connect()
        except Exception as exc:  # reported below, outside the task group (which would wrap it)
            failed = exc
        else:
            server = bridge(upstream, first)
            try:
                async with stdio_server() as (read_stream, write_stream):
                    await server.run(read_stream, write_stream, server.create_initialization_options())
            finally:
                upstream.close()
    if failed is not None:
        raise CommandError(_connect_refusal(endpoint, token, failed))


def _connect_refusal(endpoint: str, token: str, exc: BaseException) -> str:
    """Why the first connection failed, in words: a refused token is not a network problem."""
    try:
        answer = httpx2.post(
            endpoint,
            json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            timeout=5,
        )
    except Exception:
        return f"cannot reach the gateway at {endpoint}: {_reason(exc)} (is `relayroom serve` running? set RELAYROOM_URL)"
    if answer.status_code == 401:
        return f"the gateway at {endpoint} refused RELAYROOM_TOKEN (unknown or revoked): make one with `relayroom token create`"
    return f"the gateway at {endpoint} did not open an MCP connection (HTTP {answer.status_code}): {_reason(exc)}"


def cmd_mcp(args: argparse.Namespace) -> int:
    token = token_from_env()
    anyio.run(serve, base_url(args.url), token)
    return 0


def register(sub: Subcommands, store: argparse.ArgumentParser) -> None:
    about = "speak MCP on stdin/stdout, forwarding every request to a running gateway"
    mcp = sub.add_parser(
        "mcp", help=about, description=about + ": for MCP clients that only start a command.",
        epilog="RELAYROOM_TOKEN: the agent's project token (from the environment only, so it never shows in ps). "
               "The client's configuration: {\"command\": \"/path/to/relayroom\", \"args\": [\"mcp\"], "
               "\"env\": {\"RELAYROOM_URL\": \"http://127.0.0.1:8750\", \"RELAYROOM_TOKEN\": \"rr_...\"}}",
    )
    mcp.add_argument("--url", default=None,
                     help=f"the gateway's base URL; one ending in /mcp is taken as its gateway (default: $RELAYROOM_URL, else {DEFAULT_URL})")
    mcp.set_defaults(func=cmd_mcp)
