"""The four MCP tools, as thin wrappers over the same core as the REST API.

One rule, two doors: every tool resolves the caller (project, principal,
level) from the verified bearer token, checks the level the action needs, and
calls the function the REST route calls.  A refusal is a tool error (the
agent reads it and can act on it), never a transport error.

Results are pydantic models so the SDK publishes an `outputSchema` for each
tool and sends the result as `structuredContent` (a bare `-> dict` gives a
text blob and no schema).  Arguments carry their constraints in the schema
(enum of kinds, limit 1..50, lengths) so a client can validate before calling.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, TypeVar

import orjson
from mcp.server import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, TypeAdapter, WithJsonSchema

from gateway.core.clock import to_rfc3339
from gateway.core.errors import GatewayError
from gateway.knowledge.permissions import require
from gateway.knowledge.inputs import MAX_EVIDENCE, MAX_STATEMENT
from gateway.knowledge.model import Entry
from gateway.mcp.auth import current_principal
from gateway.mcp.errors import refused
from gateway.recall.service import DEFAULT_LIMIT, MAX_LIMIT
from gateway.recall.query import MAX_QUERY_CHARS

if TYPE_CHECKING:
    from gateway.hub import Hub

Kind = Literal["fact", "convention", "pitfall", "decision"]


# -- results ----------------------------------------------------------------------


class RecalledEntry(BaseModel):
    id: str = Field(description="Entry id: pass it to recall_used or report_error.")
    kind: Kind
    statement: str = Field(description="The knowledge itself, one self-contained statement.")
    evidence: str | None = Field(default=None, description="How it is known (a file, a command, a link), when recorded.")
    score: float = Field(
        description="0 to 1, best first. The first entry's score is a confidence that it answers the "
        "query: below 0.5, maybe nothing here does (read it before relying on it)."
    )
    trusted_since: str | None = Field(description="RFC 3339 time the entry became trusted.")
    issuers: list[str] = Field(description="The independent CI systems or owners whose checks support it.")


def flat_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each `$ref` written in place and "X or null" as a type list.

    The same constraints, published so that a client's validator checks a
    recall answer fast: the Python SDK client validates every result against
    the output schema with `jsonschema`, and resolving a `$ref` per entry and
    trying an `anyOf` per nullable field were most of that check
    (docs/decisions/0012)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return walk({**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}})
        branches = node.get("anyOf")
        if isinstance(branches, list) and branches and all(set(b) == {"type"} and isinstance(b["type"], str) for b in branches):
            rest = {k: walk(v) for k, v in node.items() if k != "anyOf"}
            return {**rest, "type": [b["type"] for b in branches]}
        return {k: walk(v) for k, v in node.items() if k != "$defs"}

    flat: dict[str, Any] = walk(schema)
    return flat


class RecallResult(BaseModel):
    recall_id: str = Field(description="Id of this recall: pass it to recall_used with an entry that shaped your work.")
    entries: Annotated[
        list[RecalledEntry],
        WithJsonSchema(flat_schema(TypeAdapter(list[RecalledEntry]).json_schema())),
    ] = Field(description="Trusted, unexpired entries, best first (possibly empty).")


class LearnResult(BaseModel):
    id: str = Field(description="The entry id (the existing entry's id when duplicate is true).")
    state: Literal["candidate", "trusted", "contradicted", "retired"] = Field(
        description="candidate for a new entry: it reaches other agents only once CI or an owner confirms it."
    )
    duplicate: bool = Field(description="True when an equal statement already existed; nothing new was written.")


class UsedResult(BaseModel):
    ok: bool = Field(default=True, description="Always true: the use is recorded (once per recall and entry).")


class ReportResult(BaseModel):
    event_id: str = Field(description="Id of the error event that was recorded.")
    effect: Literal["contradicted", "duplicate", "none"] = Field(
        description="What the report did to the entry. contradicted: it left everyone's recall now, until an "
        "owner reviews it. duplicate: you had already reported it inside the window, so nothing changed. "
        "none: the event was recorded but changed no entry (only for an event that names no entry, which "
        "this tool never sends)."
    )


def recalled(entry: Entry, score: float) -> dict[str, Any]:
    """One entry of a recall answer, as RecalledEntry publishes it."""
    return {
        "id": entry.id,
        "kind": entry.kind,
        "statement": entry.statement,
        "evidence": entry.evidence,
        "score": round(score, 6),
        "trusted_since": to_rfc3339(entry.promoted_at),
        "issuers": entry.vouched_by(),
    }


# recall is the hot tool: its answer is built as plain JSON (no model per
# entry, no second pass to dump it) and written once, compact, for the text
# block; the SDK still checks it against RecallResult, the published schema.
RecallAnswer = Annotated[CallToolResult, RecallResult]


def recall_answer(recall_id: str, entries: list[dict[str, Any]]) -> CallToolResult:
    payload = {"recall_id": recall_id, "entries": entries}
    text = orjson.dumps(payload).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=payload)


# -- argument types: the schema an agent sees ---------------------------------------

Query = Annotated[
    str,
    Field(
        description="What you are about to do or want to know, in your own words "
        "(e.g. 'how are database migrations named?'). Words like 'pitfall', 'gotcha' or "
        "'why did we decide' also steer the ranking toward that kind.",
        max_length=MAX_QUERY_CHARS,
    ),
]
KindFilter = Annotated[
    Kind | None,
    Field(description="Only entries of this kind: fact, convention (how this project does a thing), "
          "pitfall (a trap) or decision (a choice and its reason). Omit for all kinds."),
]
LearnKind = Annotated[
    Kind,
    Field(description="fact, convention (how this project does a thing), pitfall (a trap and how to avoid it) "
          "or decision (a choice and its reason)."),
]
Limit = Annotated[int, Field(description="How many entries at most.", ge=1, le=MAX_LIMIT)]
Statement = Annotated[
    str,
    Field(description="One self-contained sentence another agent can act on without your context, "
          "e.g. 'Migrations are named YYYYMMDD_description.sql'. Only characters a person can see: "
          "invisible or direction-changing ones (tag characters, zero-width, bidirectional controls) are "
          "refused (invisible_text).", min_length=1, max_length=MAX_STATEMENT),
]
Evidence = Annotated[
    str | None,
    Field(description="How you know: a file path, a failing command and its output, a link.", max_length=MAX_EVIDENCE),
]
TtlDays = Annotated[
    float | None,
    Field(description="Days after which the entry expires (for knowledge that goes stale). Omit for no expiry.",
          gt=0, le=36500),
]
EntryId = Annotated[str, Field(description="An entry id, as returned by recall.", min_length=1, max_length=100)]
RecallId = Annotated[str, Field(description="The recall_id returned by recall.", min_length=1, max_length=100)]
Detail = Annotated[
    str,
    Field(description="What happened that shows the entry is wrong: the command, the error, what is true instead.",
          min_length=1, max_length=MAX_EVIDENCE),
]


ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Any])


def _tool(server: MCPServer[Any], annotations: ToolAnnotations) -> Callable[[ToolFunction], ToolFunction]:
    """Register a tool with its docstring, dedented, as the description an agent reads."""

    def register(fn: ToolFunction) -> ToolFunction:
        server.add_tool(
            fn, title=annotations.title, description=inspect.cleandoc(fn.__doc__ or ""), annotations=annotations
        )
        return fn

    return register


# What a client may assume when it decides whether to ask the user first.
# recall is read-only for the caller's world: the recall record it keeps is
# the gateway's own bookkeeping (what recall_used is checked against), not a
# change to the project's knowledge.  learn only ever adds a candidate that
# nobody else sees, and learning it again changes nothing.  report_error is
# the one destructive tool: it takes a trusted entry out of everyone's
# recall until an owner reviews it.  None of them reaches outside the gateway.
RECALL = ToolAnnotations(title="Recall project knowledge", read_only_hint=True, open_world_hint=False)
LEARN = ToolAnnotations(
    title="Learn (propose) project knowledge",
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False,
)
USED = ToolAnnotations(
    title="Say a recalled entry was used",
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False,
)
REPORT = ToolAnnotations(
    title="Report a wrong entry",
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False,
)


def register_tools(server: MCPServer[Any], hub: Hub) -> None:
    @_tool(server, RECALL)
    async def recall(query: Query, kind: KindFilter = None, limit: Limit = DEFAULT_LIMIT) -> RecallAnswer:
        """Look up what this project already knows before you act: its conventions, pitfalls, decisions and facts.

        Call it first, before non-trivial work (a migration, the build, an API
        change) and whenever you are unsure how this project does something;
        also before learn, so you do not propose what is already known. It
        returns only entries that CI checks or a project owner have confirmed
        and that have not expired, best first, plus a recall_id. When an entry
        shapes your work, call recall_used(recall_id, entry_id); when one
        proves wrong, call report_error. An empty list means nothing confirmed
        matches yet; a first score below 0.5, maybe nothing relevant.
        Changes no knowledge. Any token may call it.
        """
        principal = await current_principal(hub)
        try:
            recall_id, results = await hub.recall.recall(principal, query, kind, limit, via="mcp")
        except GatewayError as exc:
            raise refused(exc) from None
        return recall_answer(recall_id, [recalled(entry, score) for entry, score in results])

    @_tool(server, LEARN)
    async def learn(
        kind: LearnKind, statement: Statement, evidence: Evidence = None, ttl_days: TtlDays = None
    ) -> LearnResult:
        """Propose something durable you found out about this project, for the agents after you.

        Recall first: if recall already returns it, do not learn it again. Use
        learn for a convention you had to discover, a pitfall you fell into, a
        decision and its reason, or a fact the code does not make obvious.
        Write one self-contained statement and say how you know in evidence.
        It is stored as a candidate: only you see it until CI checks or the
        project owner confirm it, so recall will not return it yet and nothing
        an agent sends makes it trusted. Learning the same statement again
        returns the existing entry (duplicate=true). Needs a write token.
        """
        principal = await current_principal(hub)
        try:
            entry, duplicate = await hub.knowledge.learn(principal, kind, statement, evidence, ttl_days=ttl_days)
        except GatewayError as exc:
            raise refused(exc) from None
        return LearnResult(id=entry.id, state=entry.effective_state(hub.clock.now()), duplicate=duplicate)  # type: ignore[arg-type]

    @_tool(server, USED)
    async def recall_used(recall_id: RecallId, entry_id: EntryId) -> UsedResult:
        """Say that an entry your recall returned actually shaped your work.

        Call it once per entry you relied on, with the recall_id of the recall
        that returned it: it is how the project learns which knowledge helps.
        Repeating it is harmless (each recall/entry pair counts once). It fails
        (recall_not_found) for an entry that recall did not return to you.
        Any token may call it.
        """
        principal = await current_principal(hub)
        try:
            await hub.recall.used(principal, recall_id, entry_id)
        except GatewayError as exc:
            raise refused(exc) from None
        return UsedResult(ok=True)

    @_tool(server, REPORT)
    async def report_error(contradicts: EntryId, detail: Detail) -> ReportResult:
        """Report that a recalled entry is wrong: following it failed, or the code says otherwise.

        contradicts is the entry id; detail says what happened and what is true
        instead. The entry is demoted at once: it leaves everyone's recall until
        an owner reviews it (effect=contradicted). Reporting the same entry again
        inside the window changes nothing (effect=duplicate). Demotions are
        limited per principal and hour (rate_limited says when to retry). Needs a
        write token.
        """
        principal = await current_principal(hub)
        try:
            require(principal, "report_error")
            event_id, effect = await hub.knowledge.post_event(
                principal, "error", {"contradicts": contradicts, "detail": detail, "via": "mcp"}
            )
        except GatewayError as exc:
            raise refused(exc) from None
        return ReportResult(event_id=event_id, effect=effect)  # type: ignore[arg-type]
