"""REST routes for entries, events, recall, audit, settings and playbook.

Each handler reads its inputs, calls one core function, and shapes the
answer; the rule itself lives below, in `gateway.knowledge.service` and friends.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.core.clock import parse_rfc3339, to_rfc3339
from gateway.core.errors import Invalid
from gateway.knowledge.model import Entry
from gateway.knowledge.permissions import require
from gateway.web.inputs import bearer, hub_of, json_body, principal_for, query_int, query_str, raw_body
from gateway.web.responses import JSONResponse



def _now(request: Request) -> float:
    return hub_of(request).clock.now()


async def create_entry(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "learn")
    body = await json_body(request, required=("kind", "statement"), optional=("evidence", "ttl_days", "expires_at"))
    expires_at = None
    if body.get("expires_at") is not None:
        try:
            expires_at = parse_rfc3339(body["expires_at"])
        except (ValueError, TypeError, OverflowError):
            raise Invalid("expires_at must be an RFC 3339 timestamp such as 2026-12-31T00:00:00Z", code="invalid_field") from None
    entry, duplicate = await hub_of(request).knowledge.learn(
        principal,
        body["kind"],
        body["statement"],
        body.get("evidence"),
        ttl_days=body.get("ttl_days"),
        expires_at=expires_at,
    )
    return created_entry(entry, duplicate, _now(request))


def created_entry(entry: Entry, duplicate: bool, now: float) -> Response:
    """201 with the new entry, or 200 with `duplicate: true` when the statement
    was already a live entry (learn and a proposal's approval answer alike)."""
    payload = entry.to_json(now)
    if duplicate:
        payload["duplicate"] = True
        return JSONResponse(payload, status_code=200)
    return JSONResponse(payload, status_code=201)


async def list_entries(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    entries, next_cursor = await hub_of(request).knowledge.list(
        principal,
        state=query_str(request, "state", 20),
        kind=query_str(request, "kind", 20),
        limit=query_int(request, "limit", 50, 1, 200),
        cursor=query_str(request, "cursor", 64),
    )
    now = _now(request)
    return JSONResponse({"entries": [e.to_json(now) for e in entries], "next_cursor": next_cursor})


async def get_entry(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    entry = await hub_of(request).knowledge.get(principal, request.path_params["entry_id"])
    return JSONResponse(entry.to_json(_now(request)))


async def confirm_entry(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "confirm")
    await json_body(request, allow_empty=True)
    entry = await hub_of(request).knowledge.confirm(principal, request.path_params["entry_id"])
    return JSONResponse(entry.to_json(_now(request)))


async def refute_entry(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "refute")
    body = await json_body(request, required=("reason",))
    entry = await hub_of(request).knowledge.refute(principal, request.path_params["entry_id"], body["reason"])
    return JSONResponse(entry.to_json(_now(request)))


async def post_event(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "post_event")
    body = await json_body(request, required=("type", "detail"))
    event_id, effect = await hub_of(request).knowledge.post_event(principal, body["type"], body["detail"])
    return JSONResponse({"event_id": event_id, "effect": effect}, status_code=202)


def recall_entry_json(entry: Entry, score: float, now: float) -> dict[str, Any]:
    payload = entry.to_json(now)
    payload["score"] = round(score, 6)
    return payload


async def recall(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    query = query_str(request, "q", 2000) or ""
    recall_id, results = await hub_of(request).recall.recall(
        principal,
        query,
        query_str(request, "kind", 20),
        query_int(request, "limit", 10, 1, 50),
        via="rest",
    )
    now = _now(request)
    return JSONResponse({"recall_id": recall_id, "entries": [recall_entry_json(e, s, now) for e, s in results]})


async def recall_used(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    body = await json_body(request, required=("recall_id", "entry_id"))
    await hub_of(request).recall.used(principal, body["recall_id"], body["entry_id"])
    return Response(status_code=204)


async def audit(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    require(principal, "read_audit")
    limit = query_int(request, "limit", 100, 1, 500)
    rows, next_cursor = await hub_of(request).ledger.audit_page(
        principal,
        entry_id=query_str(request, "entry", 100),
        action=query_str(request, "action", 40),
        cursor=query_str(request, "cursor", 64),
        limit=limit,
    )
    return JSONResponse(
        {
            "rows": [
                {"at": to_rfc3339(r["at"]), "action": r["action"], "entry_id": r["entry_id"], "actor": r["actor"], "detail": r["detail"]}
                for r in rows
            ],
            "next_cursor": next_cursor,
        }
    )


async def settings(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    accounts = hub_of(request).accounts
    if request.method == "PATCH":
        require(principal, "change_settings")
        body = await json_body(
            request,
            optional=("k_distinct_issuers", "window_days", "playbook_min_trusted", "playbook_top_n", "demotions_per_hour"),
        )
        updated = await accounts.update_settings(principal, body)
        return JSONResponse(updated.to_json())
    return JSONResponse((await accounts.settings(principal)).to_json())


async def playbook(request: Request) -> Response:
    principal = await principal_for(request, request.path_params["project"])
    accounts = hub_of(request).accounts
    if request.method == "PUT":
        require(principal, "edit_playbook")
        raw = await raw_body(request, 64 * 1024)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Invalid("the playbook must be UTF-8 text", code="invalid_field") from None
        await accounts.set_playbook(principal, text)
        return Response(text, media_type="text/markdown; charset=utf-8")
    return Response(await accounts.playbook(principal), media_type="text/markdown; charset=utf-8")


async def whoami(request: Request) -> Response:
    """Who a token is: its project, principal and level (for clients such as
    `relayroom recall` that hold only a token and need the project's path)."""
    principal = await hub_of(request).accounts.authenticate(bearer(request))
    return JSONResponse({"project": principal.project.slug, "principal": principal.name, "level": principal.level})


P = "/v1/projects/{project}"

# The router tries routes in order, each a regular expression: an agent's
# most frequent call, recall, comes first.
routes = [
    Route(f"{P}/recall", recall, methods=["GET"]),
    Route(f"{P}/recall_used", recall_used, methods=["POST"]),
    Route(f"{P}/entries", create_entry, methods=["POST"]),
    Route(f"{P}/entries", list_entries, methods=["GET"]),
    Route(f"{P}/entries/{{entry_id}}", get_entry, methods=["GET"]),
    Route(f"{P}/entries/{{entry_id}}/confirm", confirm_entry, methods=["POST"]),
    Route(f"{P}/entries/{{entry_id}}/refute", refute_entry, methods=["POST"]),
    Route(f"{P}/events", post_event, methods=["POST"]),
    Route(f"{P}/audit", audit, methods=["GET"]),
    Route(f"{P}/settings", settings, methods=["GET", "PATCH"]),
    Route(f"{P}/playbook", playbook, methods=["GET", "PUT"]),
    Route("/v1/whoami", whoami, methods=["GET"]),
]
