"""The four MCP tools, as thin wrappers over the same core as the REST API."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from mcp.server.mcpserver.exceptions import ToolError

from gateway.clock import to_rfc3339
from gateway.errors import GatewayError
from gateway.model import Principal


def _tool_error(exc: GatewayError) -> ToolError:
    return ToolError(f"{exc.code}: {exc.message}")


def register_tools(server: Any, hub: Any, caller: Callable[[], Awaitable[Principal]]) -> None:
    @server.tool()
    async def recall(query: str, kind: str | None = None, limit: int = 10) -> dict[str, Any]:
        """Look up this project's trusted knowledge before non-trivial work.

        Ask in your own words what you are about to do ("how are migrations
        named?"). Optionally filter by kind: fact, convention, pitfall or
        decision. Returns only trusted, unexpired entries, best first, with a
        recall_id: pass it to recall_used for each entry that shaped your work.
        """
        principal = await caller()
        try:
            recall_id, results = await hub.recall.recall(principal, query, kind, limit, via="mcp")
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return {
            "recall_id": recall_id,
            "entries": [
                {
                    "id": entry.id,
                    "kind": entry.kind,
                    "statement": entry.statement,
                    "score": round(score, 6),
                    "trusted_since": to_rfc3339(entry.promoted_at),
                    "issuers": sorted(entry.issuers()),
                }
                for entry, score in results
            ],
        }

    @server.tool()
    async def learn(kind: str, statement: str, evidence: str | None = None, ttl_days: float | None = None) -> dict[str, Any]:
        """Record something durable you learned about this project.

        kind is fact, convention, pitfall or decision; statement is one
        self-contained sentence; evidence says how you know (a file, a failing
        command). The entry is stored as a candidate: no other agent sees it
        until CI or the project owner confirms it. Needs a write token.
        """
        principal = await caller()
        try:
            entry, duplicate = await hub.knowledge.learn(principal, kind, statement, evidence, ttl_days=ttl_days)
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return {"id": entry.id, "state": entry.effective_state(hub.clock.now()), "duplicate": duplicate}

    @server.tool()
    async def recall_used(recall_id: str, entry_id: str) -> dict[str, Any]:
        """Report that an entry returned by recall actually shaped your work.

        Optional, and cheap: it is how the project measures whether recall
        helps. Each (recall_id, entry_id) pair counts once.
        """
        principal = await caller()
        try:
            await hub.recall.used(principal, recall_id, entry_id)
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return {"ok": True}

    @server.tool()
    async def report_error(contradicts: str, detail: str) -> dict[str, Any]:
        """Report that a recalled entry is wrong: you hit a failure that contradicts it.

        contradicts is the entry id; detail says what happened. The entry is
        demoted at once and leaves recall. Needs a write token.
        """
        principal = await caller()
        try:
            event_id, effect = await hub.knowledge.post_event(
                principal, "error", {"contradicts": contradicts, "detail": detail, "via": "mcp"}
            )
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return {"event_id": event_id, "effect": effect}
