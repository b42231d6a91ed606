"""Resources and prompts: what an agent's client can show or load without a tool call.

- `relayroom://RELAYROOM.md`: the caller's project playbook, the same
  document as `GET /projects/{p}/RELAYROOM.md` (the base playbook, then the
  most used trusted entries once there are enough of them);
- `relayroom://entries/{entry_id}`: one entry as JSON, as the REST API shows
  it to this caller (a trusted entry, or one the caller wrote; an owner sees
  every entry);
- the prompt `before_task`: recalls for a task and hands the agent what was
  found, with the recall_id it needs for recall_used.

Resource URIs name no project: the bearer token says which one, as it does
for the tools.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server import MCPServer
from pydantic import Field

from gateway.core.errors import GatewayError, NotFound
from gateway.knowledge.playbook import relayroom_md
from gateway.mcp.auth import current_principal
from gateway.mcp.errors import request_error
from gateway.recall.query import MAX_QUERY_CHARS

if TYPE_CHECKING:
    from gateway.hub import Hub

PLAYBOOK_URI = "relayroom://RELAYROOM.md"
ENTRY_TEMPLATE = "relayroom://entries/{entry_id}"
PROMPT_RECALL_LIMIT = 8
MAX_ENTRY_ID = 100

Task = Annotated[
    str,
    Field(description="The task you are about to start, in a sentence (e.g. 'add a migration for the orders table').",
          max_length=MAX_QUERY_CHARS),
]


def register_context(server: MCPServer[Any], hub: Hub) -> None:
    @server.resource(
        PLAYBOOK_URI,
        name="RELAYROOM.md",
        title="Project playbook (RELAYROOM.md)",
        description="This project's playbook for agents: how to use RelayRoom here, then the most used trusted "
        "entries grouped by kind. Read it at the start of a session.",
        mime_type="text/markdown",
    )
    async def playbook() -> str:
        try:
            principal = await current_principal(hub)
            return await relayroom_md(hub.driver, principal.project, hub.clock.now())
        except GatewayError as exc:
            raise request_error(exc, PLAYBOOK_URI) from None

    @server.resource(
        ENTRY_TEMPLATE,
        name="entry",
        title="A project knowledge entry",
        description="One entry by id (the ids recall returns), as JSON: kind, statement, evidence, state, "
        "who supports it. Trusted entries, and the ones you wrote yourself.",
        mime_type="application/json",
    )
    async def entry(entry_id: str) -> str:
        uri = ENTRY_TEMPLATE.format(entry_id=entry_id)
        try:
            principal = await current_principal(hub)
            if len(entry_id) > MAX_ENTRY_ID:  # no id is that long: not worth a lookup, nor an echo
                raise NotFound(f"no entry of {len(entry_id)} characters in project {principal.project.slug}",
                               code="entry_not_found")
            found = await hub.knowledge.get(principal, entry_id)
        except GatewayError as exc:
            raise request_error(exc, uri) from None
        return json.dumps(found.to_json(hub.clock.now()), ensure_ascii=False)

    @server.prompt(
        name="before_task",
        title="Before a task: what this project knows",
        description="Recall this project's trusted knowledge for a task and start from it: conventions to "
        "follow, pitfalls to avoid, decisions already taken.",
    )
    async def before_task(task: Task) -> str:
        try:
            principal = await current_principal(hub)
            recall_id, results = await hub.recall.recall(principal, task, None, PROMPT_RECALL_LIMIT, via="mcp")
        except GatewayError as exc:
            raise request_error(exc) from None
        return briefing(task, recall_id, [(e.kind, e.id, e.statement, e.evidence) for e, _ in results])


def briefing(task: str, recall_id: str, found: list[tuple[str, str, str, str | None]]) -> str:
    lines = [f"Task: {task}", ""]
    if found:
        lines.append(f"RelayRoom recalled what this project's CI checks or owner have confirmed (recall_id {recall_id}):")
        lines.append("")
        for number, (kind, entry_id, statement, evidence) in enumerate(found, 1):
            source = f"; evidence: {evidence}" if evidence else ""
            lines.append(f"{number}. [{kind}] {statement} (entry {entry_id}{source})")
        lines += [
            "",
            "Follow these where they apply. For each entry that shapes your work, call recall_used with "
            f"recall_id {recall_id} and its entry id; if one proves wrong, call report_error with its id.",
        ]
    else:
        lines.append("RelayRoom has no trusted knowledge that matches this task yet.")
    lines.append(
        "When you find out something durable that is not here (a convention, a pitfall, a decision and its reason), "
        "call learn with one self-contained statement and how you know it."
    )
    return "\n".join(lines)
