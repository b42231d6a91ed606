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
from typing import Annotated, Any, Awaitable, Callable, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from gateway.core.clock import to_rfc3339
from gateway.core.errors import GatewayError
from gateway.knowledge.permissions import require
from gateway.knowledge.inputs import MAX_EVIDENCE, MAX_STATEMENT
from gateway.knowledge.model import Entry, Principal
from gateway.recall.service import DEFAULT_LIMIT, MAX_LIMIT
from gateway.recall.search import MAX_QUERY_CHARS

Kind = Literal["fact", "convention", "pitfall", "decision"]

Caller = Callable[[], Awaitable[Principal]]


# -- results ----------------------------------------------------------------------


class RecalledEntry(BaseModel):
    id: str = Field(description="Entry id: pass it to recall_used or report_error.")
    kind: Kind
    statement: str = Field(description="The knowledge itself, one self-contained statement.")
    evidence: str | None = Field(default=None, description="How it is known (a file, a command, a link), when recorded.")
    score: float = Field(description="Relevance to the query; higher is better. Only comparable within one recall.")
    trusted_since: str | None = Field(description="RFC 3339 time the entry became trusted.")
    issuers: list[str] = Field(description="The independent CI systems or owners whose checks support it.")


class RecallResult(BaseModel):
    recall_id: str = Field(description="Id of this recall: pass it to recall_used with an entry that shaped your work.")
    entries: list[RecalledEntry] = Field(description="Trusted, unexpired entries, best first (possibly empty).")


class LearnResult(BaseModel):
    id: str = Field(description="The entry id (the existing entry's id when duplicate is true).")
    state: Literal["candidate", "trusted", "contradicted", "retired"] = Field(
        description="candidate for a new entry: it reaches other agents only once CI or an owner confirms it."
    )
    duplicate: bool = Field(description="True when an equal statement already existed; nothing new was written.")


class UsedResult(BaseModel):
    ok: bool = True


class ReportResult(BaseModel):
    event_id: str
    effect: Literal["contradicted", "duplicate", "none"] = Field(
        description="contradicted: the entry left recall now; duplicate: you had already reported it inside the window."
    )


def recalled(entry: Entry, score: float) -> RecalledEntry:
    return RecalledEntry(
        id=entry.id,
        kind=entry.kind,  # type: ignore[arg-type]
        statement=entry.statement,
        evidence=entry.evidence,
        score=round(score, 6),
        trusted_since=to_rfc3339(entry.promoted_at),
        issuers=entry.vouched_by(),
    )


def _tool_error(exc: GatewayError) -> ToolError:
    # The code first, so an agent (or a test) can branch on it; the message
    # says what to do next, e.g. which token level the action needs.
    return ToolError(f"{exc.code}: {exc.message}")


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
Limit = Annotated[int, Field(description="How many entries at most.", ge=1, le=MAX_LIMIT)]
Statement = Annotated[
    str,
    Field(description="One self-contained sentence another agent can act on without your context, "
          "e.g. 'Migrations are named YYYYMMDD_description.sql'.", min_length=1, max_length=MAX_STATEMENT),
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


def _tool(server: Any, title: str, annotations: ToolAnnotations) -> Callable[[Any], Any]:
    """Register a tool with its docstring, dedented, as the description an agent reads."""

    def register(fn: Any) -> Any:
        server.add_tool(fn, title=title, description=inspect.cleandoc(fn.__doc__ or ""), annotations=annotations)
        return fn

    return register


def register_tools(server: Any, hub: Any, caller: Caller) -> None:
    @_tool(
        server,
        title="Recall project knowledge",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False),
    )
    async def recall(query: Query, kind: KindFilter = None, limit: Limit = DEFAULT_LIMIT) -> RecallResult:
        """Look up this project's trusted knowledge: conventions, pitfalls, decisions and facts.

        Call it before non-trivial work (writing a migration, touching the build,
        changing an API) and whenever you are unsure how this project does
        something. Returns only entries that CI checks or a project owner have
        confirmed and that have not expired, best first, plus a recall_id. If an
        entry shapes your work, call recall_used(recall_id, entry_id); if one
        proves wrong, call report_error. Any read token may call it.
        """
        principal = await caller()
        try:
            recall_id, results = await hub.recall.recall(principal, query, kind, limit, via="mcp")
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return RecallResult(recall_id=recall_id, entries=[recalled(entry, score) for entry, score in results])

    @_tool(
        server,
        title="Learn (propose) project knowledge",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    async def learn(
        kind: Kind, statement: Statement, evidence: Evidence = None, ttl_days: TtlDays = None
    ) -> LearnResult:
        """Record something durable you found out about this project, for future agents.

        Use it for a convention you had to discover, a pitfall you fell into, a
        decision and its reason, or a fact that is not obvious from the code.
        Write one self-contained statement and say how you know in evidence.
        The entry is stored as a candidate: only you see it until CI checks or
        the project owner confirm it, so recall will not return it yet. Learning
        the same statement again returns the existing entry (duplicate=true).
        Needs a write token.
        """
        principal = await caller()
        try:
            entry, duplicate = await hub.knowledge.learn(principal, kind, statement, evidence, ttl_days=ttl_days)
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return LearnResult(id=entry.id, state=entry.effective_state(hub.clock.now()), duplicate=duplicate)  # type: ignore[arg-type]

    @_tool(
        server,
        title="Say a recalled entry was used",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    async def recall_used(recall_id: RecallId, entry_id: EntryId) -> UsedResult:
        """Report that an entry returned by your recall actually shaped your work.

        Call it once per entry you relied on, with the recall_id of the recall
        that returned it. It is how the project measures whether recall helps;
        repeating it is harmless (each recall/entry pair counts once). Fails
        for an entry that recall did not return to you. Any read token may call it.
        """
        principal = await caller()
        try:
            await hub.recall.used(principal, recall_id, entry_id)
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return UsedResult(ok=True)

    @_tool(
        server,
        title="Report a wrong entry",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False),
    )
    async def report_error(contradicts: EntryId, detail: Detail) -> ReportResult:
        """Report that a recalled entry is wrong: following it failed, or the code says otherwise.

        contradicts is the entry id; detail says what happened and what is true
        instead. The entry is demoted at once and leaves everyone's recall until
        an owner reviews it. Reporting the same entry again inside the window
        changes nothing (effect=duplicate). Demotions are rate-limited per
        principal. Needs a write token.
        """
        principal = await caller()
        try:
            require(principal, "report_error")
            event_id, effect = await hub.knowledge.post_event(
                principal, "error", {"contradicts": contradicts, "detail": detail, "via": "mcp"}
            )
        except GatewayError as exc:
            raise _tool_error(exc) from None
        return ReportResult(event_id=event_id, effect=effect)  # type: ignore[arg-type]
