"""The OpenAPI 3 description of the HTTP API, built from one table.

Each operation names its level, its body schema and its query parameters;
the error responses are the same body everywhere.  schemathesis fuzzes the
gateway from this document (tests/http/test_fuzz_api.py), so a route missing here
is a route not fuzzed.
"""

from __future__ import annotations

from typing import Any

from gateway import __version__
from gateway.accounts.service import MAX_PLAYBOOK
from gateway.core.visible import invisible
from gateway.knowledge.settings import SETTING_RULES
from gateway.knowledge.inputs import MAX_EVENT_TYPE, MAX_EVIDENCE, MAX_PAGE, MAX_STATEMENT, MAX_TTL_DAYS
from gateway.recall.learning import MAX_DAYS
from gateway.knowledge.proposals import PROPOSAL_STATES
from gateway.knowledge.service import BULK_ACTIONS, MAX_BULK
from gateway.knowledge.threads import MAX_AUTHOR, MAX_TEXT, MAX_THREAD_ID
from gateway.ci.intake import MAX_CHECK, MAX_RUN_URL
from gateway.ci.publish import MAX_PATH as MAX_CHECKMAP_PATH
from gateway.recall.service import MAX_LIMIT as MAX_RECALL
from gateway.recall.query import MAX_QUERY_CHARS
from gateway.knowledge.trust import CREATED_VIA, KINDS, STATES

S = dict[str, Any]


def _obj(required: list[str], props: S, *, additional: bool = False) -> S:
    schema: S = {"type": "object", "properties": props, "additionalProperties": additional}
    if required:  # OpenAPI 3.0 refuses an empty `required`
        schema["required"] = required
    return schema


STRING = {"type": "string"}
SLUG = "^[a-z0-9][a-z0-9-]{0,62}$"


def _invisible_class() -> str:
    """The characters of the Basic Multilingual Plane that gateway.core.visible
    refuses, as the ranges of a regular expression class (built from the rule
    itself; ECMA-262 5.1, the dialect OpenAPI 3.0 names, cannot write a
    character past U+FFFF, such as a tag character, in a class).  Surrogates
    are left out: without the `u` flag that dialect reads every character
    past U+FFFF, an emoji too, as two of them."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x10000):
        if invisible(chr(code)) and not 0xD800 <= code <= 0xDFFF:
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


INVISIBLE = _invisible_class()
VISIBLE_RULE = (
    "every character visible: one of category Cc other than tab, line feed and carriage return, of category "
    "Cf (the tag characters U+E0000 to U+E007F, bidirectional embeddings, overrides and isolates, zero-width "
    "spaces and joiners, the byte order mark), a non-character or a lone surrogate is refused with 422 "
    "invisible_text, naming the first one and where it stands (the pattern lists those below U+10000, "
    "surrogates aside)"
)


def text(limit: int) -> S:
    """A free-text field as the API checks it (gateway.knowledge.inputs.validate_text):
    at most `limit` characters, every one visible, something other than
    white space (Python's: \\x1c-\\x1f and \\x85 are white space there, and
    invisible besides)."""
    return {"type": "string", "minLength": 1, "maxLength": limit, "description": f"not blank; {VISIBLE_RULE}",
            "pattern": f"^[^{INVISIBLE}]*[^\\s{INVISIBLE}][^{INVISIBLE}]*$"}


TIME = {"type": "string", "format": "date-time"}
NULLABLE_TIME = {"type": "string", "format": "date-time", "nullable": True}

ERROR = _obj(
    ["error"],
    {"error": _obj(["code", "message"], {"code": {"type": "string", "pattern": "^[a-z0-9_]+$"}, "message": STRING}, additional=True)},
)

ENTRY = _obj(
    ["id", "project", "kind", "statement", "state", "created_at", "created_by", "created_via", "distinct_issuers", "supports", "contradictions"],
    {
        "id": STRING,
        "project": STRING,
        "kind": {"type": "string", "enum": list(KINDS)},
        "statement": STRING,
        "evidence": {"type": "string", "nullable": True},
        "state": {"type": "string", "enum": list(STATES)},
        "created_at": TIME,
        "created_by": STRING,
        "created_via": {"type": "string", "enum": list(CREATED_VIA)},
        "expires_at": NULLABLE_TIME,
        "promoted_at": NULLABLE_TIME,
        "promoted_by": {"type": "string", "nullable": True},
        "distinct_issuers": {"type": "integer", "minimum": 0},
        "vouched_by": {"type": "array", "items": STRING, "description": "the CI issuers supporting the entry, sorted, then owner:<name> when an owner's confirm made it trusted"},
        "supports": {"type": "array", "items": _obj(["issuer", "source", "at"], {"issuer": STRING, "source": STRING, "attestation_id": {"type": "string", "nullable": True}, "at": TIME}, additional=True)},
        "contradictions": {"type": "array", "items": _obj(["by", "at"], {"by": STRING, "detail": {}, "at": TIME}, additional=True)},
        "duplicate": {"type": "boolean"},
        "score": {"type": "number", "description": "in a recall answer, 0 to 1, best first; the first entry's is the estimated chance that it answers the question, for a question as likely to have no answer in the project as one: below 0.5, maybe nothing relevant"},
    },
    additional=True,
)

LEARN = _obj(
    ["kind", "statement"],
    {
        "kind": {"type": "string", "enum": list(KINDS)},
        "statement": text(MAX_STATEMENT),
        "evidence": {**text(MAX_EVIDENCE), "nullable": True},
        "ttl_days": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": int(MAX_TTL_DAYS), "nullable": True},
        "expires_at": {"type": "string", "format": "date-time", "nullable": True, "description": "in the future"},
    },
)
EVENT = _obj(["type", "detail"], {"type": text(MAX_EVENT_TYPE), "detail": {"type": "object"}})
REASON = _obj(["reason"], {"reason": text(MAX_EVIDENCE)})
OPTIONAL_REASON = _obj([], {"reason": text(MAX_EVIDENCE)})
# Exactly one of the two: ttl_days, or expires_at (null clears the expiry).
EXPIRY = {
    **_obj(
        [],
        {
            "ttl_days": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": int(MAX_TTL_DAYS)},
            "expires_at": {"type": "string", "format": "date-time", "nullable": True,
                           "description": "in the future; null clears the expiry"},
        },
    ),
    "minProperties": 1,
    "maxProperties": 1,
}
CORRECTION = _obj(
    ["statement"],
    {
        "statement": text(MAX_STATEMENT),
        "kind": {"type": "string", "enum": list(KINDS)},
        "evidence": text(MAX_EVIDENCE),
        "reason": text(MAX_EVIDENCE),
    },
)
_ENTRY_IDS = {"type": "array", "minItems": 1, "maxItems": MAX_BULK, "items": {"type": "string", "minLength": 1, "maxLength": 100}}
# A refute needs its reason (it is what the entry's contradiction says); confirm and retire may carry one.
BULK = {
    "oneOf": [
        _obj(["action", "entry_ids", "reason"],
             {"action": {"type": "string", "enum": ["refute"]}, "entry_ids": _ENTRY_IDS, "reason": text(MAX_EVIDENCE)}),
        _obj(["action", "entry_ids"],
             {"action": {"type": "string", "enum": [a for a in BULK_ACTIONS if a != "refute"]}, "entry_ids": _ENTRY_IDS,
              "reason": text(MAX_EVIDENCE)}),
    ]
}
BULK_RESULT = _obj(
    ["action", "moved", "refused", "results"],
    {
        "action": STRING,
        "moved": {"type": "integer", "minimum": 0},
        "refused": {"type": "integer", "minimum": 0},
        "results": {"type": "array", "items": _obj(["entry_id", "ok"], {"entry_id": STRING, "ok": {"type": "boolean"}, "entry": ENTRY, "error": ERROR["properties"]["error"]})},
    },
)
RECALL_USED = _obj(["recall_id", "entry_id"], {"recall_id": STRING, "entry_id": STRING})
# The ranges come from the one table PATCH settings is checked against.
SETTINGS_SCHEMA = _obj(
    [],
    {
        name: {
            "type": "integer" if kind is int else "number",
            "minimum": minimum,
            **({"exclusiveMinimum": True} if name == "window_days" else {}),
            "maximum": maximum,
        }
        for name, (kind, minimum, maximum, _) in SETTING_RULES.items()
    },
)
SETTINGS = {**SETTINGS_SCHEMA, "required": list(SETTING_RULES)}
SETTINGS_CHANGE = {**SETTINGS_SCHEMA, "minProperties": 1}  # PATCH: at least one setting
MESSAGE = _obj(["author", "text"], {"author": text(MAX_AUTHOR), "text": text(MAX_TEXT)})
PROPOSAL = _obj(
    ["kind", "statement", "rationale"],
    {"kind": {"type": "string", "enum": list(KINDS)}, "statement": text(MAX_STATEMENT), "rationale": text(MAX_EVIDENCE)},
)
ATTESTATION = _obj(
    ["check", "outcome"],
    {
        "check": {"type": "string", "minLength": 1, "maxLength": MAX_CHECK, "description": "printable characters"},
        "outcome": {"type": "string", "enum": ["success", "failure", "cancelled", "skipped"]},
        "project": {"type": "string", "pattern": SLUG},
        "run_url": {"type": "string", "maxLength": MAX_RUN_URL, "pattern": "^https?://"},
    },
)

CHECKMAP_PUBLICATION = _obj(
    ["project", "path", "content"],
    {
        "project": {"type": "string", "pattern": SLUG},
        "path": {"type": "string", "minLength": 1, "maxLength": MAX_CHECKMAP_PATH,
                 "description": "where the file lives in the repository (problem lines name it); printable, visible"},
        "content": {"type": "string", "description": "the file's text as the repository holds it; the whole body is at most 64 KiB"},
    },
)
PUBLISHED = {"type": "string", "enum": ["applied", "unchanged", "pending_owner"]}
CHECKMAP_ANSWER = _obj(["status", "sha256"], {"status": PUBLISHED, "sha256": STRING})
RUN = {"type": "object", "nullable": True, "additionalProperties": True,
       "description": "the run that published it: repository, ref, commit, workflow, run, url"}
CHECKMAP_VIEW = _obj(
    ["source", "sha256", "content", "pending"],
    {
        "source": {"type": "string", "enum": ["published", "file", None], "nullable": True,
                   "description": "where the map in force came from; null when the project has none"},
        "path": {"type": "string", "nullable": True},
        "sha256": {"type": "string", "nullable": True},
        "content": {"type": "string", "nullable": True},
        "published_at": NULLABLE_TIME,
        "run": RUN,
        "pending": {**_obj(["sha256", "content", "published_at", "run"],
                           {"sha256": STRING, "path": STRING, "content": STRING, "published_at": TIME, "run": RUN},
                           additional=True), "nullable": True},
    },
    additional=True,
)

PROJECT = {"name": "project", "in": "path", "required": True, "schema": {"type": "string", "pattern": SLUG}}
THREAD_ID = {"type": "string", "minLength": 1, "maxLength": MAX_THREAD_ID,
             "description": f"not blank, no control character; {VISIBLE_RULE}",
             "pattern": f"^[^\\u0000-\\u001f\\u007f{INVISIBLE}]*[^\\s\\u0000-\\u001f\\u007f\\u0085{INVISIBLE}]"
                        f"[^\\u0000-\\u001f\\u007f{INVISIBLE}]*$"}


def _path(name: str, schema: S = STRING) -> S:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query(name: str, schema: S) -> S:
    # Every optional query parameter reads an empty value as no value
    # (`?kind=&limit=` is a recall of every kind, 10 entries).
    return {"name": name, "in": "query", "required": False, "allowEmptyValue": True, "schema": schema}


def _limit(maximum: int) -> S:
    return _query("limit", {"type": "integer", "minimum": 1, "maximum": maximum})


CURSOR = _query("cursor", {"type": "string", "description": "opaque: the next_cursor of the page before (any other value is 422 invalid_cursor)"})

# method, path, level, summary, body schema (or "markdown"), extra params, success status, success schema
OPERATIONS: list[tuple[str, str, str, str, Any, list[S], int, S | None]] = [
    ("post", "/v1/projects/{project}/entries", "write", "Learn: write a candidate entry", LEARN, [], 201, ENTRY),
    ("get", "/v1/projects/{project}/entries", "read", "List the entries this level may see", None,
     [_query("state", {"type": "string", "enum": list(STATES)}), _query("kind", {"type": "string", "enum": list(KINDS)}), _limit(MAX_PAGE), CURSOR],
     200, _obj(["entries", "next_cursor"], {"entries": {"type": "array", "items": ENTRY}, "next_cursor": {"type": "string", "nullable": True}})),
    ("get", "/v1/projects/{project}/entries/{entry_id}", "read", "One entry", None, [_path("entry_id")], 200, ENTRY),
    ("post", "/v1/projects/{project}/entries/{entry_id}/confirm", "owner", "Owner confirms (promotes alone)", None, [_path("entry_id")], 200, ENTRY),
    ("post", "/v1/projects/{project}/entries/{entry_id}/refute", "owner", "Owner refutes (contradicts)", REASON, [_path("entry_id")], 200, ENTRY),
    ("post", "/v1/projects/{project}/entries/{entry_id}/retire", "owner",
     "Owner retires an entry now (it leaves recall in this commit; retired is final). Audit row: retire", OPTIONAL_REASON, [_path("entry_id")], 200, ENTRY),
    ("post", "/v1/projects/{project}/entries/{entry_id}/expiry", "owner",
     "Owner sets an entry's expiry (ttl_days from now, or expires_at in the future; expires_at null clears it). Audit row: retire",
     EXPIRY, [_path("entry_id")], 200, ENTRY),
    ("post", "/v1/projects/{project}/entries/{entry_id}/correct", "owner",
     "Owner corrects a statement: a new candidate that replaces this entry once it is trusted. 409 statement_exists if the statement already is a live entry",
     CORRECTION, [_path("entry_id")], 201, ENTRY),
    ("post", "/v1/projects/{project}/entries/bulk", "owner",
     "Confirm, refute or retire several entries: each moves (or is refused) on its own, with its own audit row",
     BULK, [], 200, BULK_RESULT),
    ("post", "/v1/projects/{project}/events", "write", "Post an event; an error with detail.contradicts demotes", EVENT, [], 202,
     _obj(["event_id", "effect"], {"event_id": STRING, "effect": {"type": "string", "enum": ["contradicted", "duplicate", "none"]}})),
    ("get", "/v1/projects/{project}/recall", "read", "Recall trusted, unexpired entries, best first", None,
     [_query("q", {"type": "string", "maxLength": MAX_QUERY_CHARS}), _query("kind", {"type": "string", "enum": list(KINDS)}), _limit(MAX_RECALL)],
     200, _obj(["recall_id", "entries"], {"recall_id": STRING, "entries": {"type": "array", "items": ENTRY}})),
    ("post", "/v1/projects/{project}/recall_used", "read", "Report that a recalled entry shaped the work", RECALL_USED, [], 204, None),
    ("get", "/v1/projects/{project}/audit", "owner", "The append-only audit ledger", None,
     [_query("entry", STRING), _query("action", STRING), _limit(500), CURSOR], 200,
     _obj(["rows"], {"rows": {"type": "array", "items": {"type": "object"}}, "next_cursor": {"type": "string", "nullable": True}})),
    ("get", "/v1/projects/{project}/learning", "owner", "Recall-quality figures", None,
     [_query("days", {"type": "integer", "minimum": 1, "maximum": MAX_DAYS})], 200, {"type": "object"}),
    ("get", "/v1/projects/{project}/playbook", "read", "The base playbook", None, [], 200, None),
    ("put", "/v1/projects/{project}/playbook", "owner", "Replace the base playbook", "markdown", [], 200, None),
    ("get", "/v1/projects/{project}/settings", "owner", "Project settings", None, [], 200, SETTINGS),
    ("patch", "/v1/projects/{project}/settings", "owner", "Change project settings", SETTINGS_CHANGE, [], 200, SETTINGS),
    ("post", "/v1/projects/{project}/threads/{thread_id}/messages", "write", "Post a thread message; durable statements become candidates",
     MESSAGE, [_path("thread_id", THREAD_ID)], 201, _obj(["message_id", "candidates"], {"message_id": STRING, "candidates": {"type": "array", "items": STRING}, "duplicates": {"type": "array", "items": STRING}})),
    ("post", "/v1/projects/{project}/proposals", "write", "Propose a reflection", PROPOSAL, [], 201, {"type": "object"}),
    ("get", "/v1/projects/{project}/proposals", "owner", "List proposals", None,
     [_query("state", {"type": "string", "enum": list(PROPOSAL_STATES)}), _limit(MAX_PAGE), CURSOR], 200, {"type": "object"}),
    ("post", "/v1/projects/{project}/proposals/{proposal_id}/approve", "owner", "Approve: registers a candidate", None, [_path("proposal_id")], 201, ENTRY),
    ("post", "/v1/projects/{project}/proposals/{proposal_id}/reject", "owner", "Reject a proposal", REASON, [_path("proposal_id")], 200, {"type": "object"}),
    ("get", "/v1/projects/{project}/checkmap", "owner",
     "The check map in force (published by the repository, or a file of the gateway's folder) and the publication "
     "waiting for the owner", None, [], 200, CHECKMAP_VIEW),
    ("post", "/v1/projects/{project}/checkmap/pending/{sha256}/approve", "owner",
     "Put the pending check map in force (judged again against the maps in force now: 422 invalid_checkmap); 409 "
     "not_pending when no map with this sha256 is pending. Audit row: checkmap", None, [_path("sha256")], 200, CHECKMAP_VIEW),
    ("post", "/v1/projects/{project}/checkmap/pending/{sha256}/reject", "owner",
     "Reject the pending check map; 409 not_pending when no map with this sha256 is pending. Audit row: checkmap",
     OPTIONAL_REASON, [_path("sha256")], 200, CHECKMAP_VIEW),
]

CI_OPERATIONS: list[tuple[str, str, str, Any, int]] = [
    ("post", "/v1/attestations", "A CI attestation authenticated by an OIDC token (Bearer)", ATTESTATION, 201),
    ("post", "/v1/webhooks/github", "GitHub webhook deliveries (X-Hub-Signature-256)", {"type": "object"}, 200),
    ("post", "/v1/webhooks/{source}", "Standard Webhooks attestation", ATTESTATION, 201),
    ("post", "/v1/checkmaps", "The repository's CI publishes the project's check map (Bearer: the run's OIDC token): "
     "200 applied or unchanged, 202 pending_owner when a binding changed, 422 invalid_checkmap with problems",
     CHECKMAP_PUBLICATION, 200),
]

ERROR_STATUSES = {
    "400": "malformed", "401": "no or bad credential", "403": "level too low", "404": "unknown, or not yours",
    "409": "state conflict", "413": "body too large", "415": "not JSON", "422": "well-formed but invalid",
    "429": "rate limited",
}


def _errors() -> S:
    return {code: {"description": text, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}} for code, text in ERROR_STATUSES.items()}


def spec() -> S:
    paths: S = {}
    for method, path, level, summary, body, params, status, schema in OPERATIONS:
        op: S = {
            "summary": summary,
            "description": f"Needs {'an' if level == 'owner' else 'a'} {level} token (or higher) of the project.",
            "security": [{"projectToken": []}],
            "parameters": [PROJECT, *params],
            "responses": {str(status): {"description": "success"}, **_errors()},
        }
        if schema is not None:
            op["responses"][str(status)]["content"] = {"application/json": {"schema": schema}}
        if body == "markdown":
            op["requestBody"] = {
                "required": False,
                "description": "UTF-8 text, whatever the Content-Type says; an empty body clears the base playbook",
                "content": {"text/markdown": {"schema": {"type": "string", "maxLength": MAX_PLAYBOOK, "pattern": f"^[^{INVISIBLE}]*$",
                                                         "description": VISIBLE_RULE}}},
            }
        elif body is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
        paths.setdefault(path, {})[method] = op
    # Learning a statement that is already there writes nothing and answers
    # the existing entry with 200 and duplicate: true.
    paths["/v1/projects/{project}/entries"]["post"]["responses"]["200"] = {
        "description": "a duplicate: the existing entry, with duplicate true",
        "content": {"application/json": {"schema": ENTRY}},
    }
    for method, path, summary, body, status in CI_OPERATIONS:
        op = {
            "summary": summary,
            "security": [{"ciToken": []}] if "webhooks" not in path else [],
            "parameters": [_path("source")] if "{source}" in path else [],
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {str(status): {"description": "recorded"}, "503": {"description": "JWKS unavailable; retry"}, **_errors()},
        }
        paths.setdefault(path, {})[method] = op
    published = paths["/v1/checkmaps"]["post"]["responses"]
    published["200"] = {"description": "applied or unchanged", "content": {"application/json": {"schema": CHECKMAP_ANSWER}}}
    published["202"] = {"description": "pending_owner: a binding changed; the owner approves or rejects it",
                        "content": {"application/json": {"schema": CHECKMAP_ANSWER}}}
    for path, summary in (("/healthz", "Liveness"), ("/readyz", "Readiness"), ("/metrics", "Prometheus metrics"), ("/openapi.json", "This document")):
        paths[path] = {"get": {"summary": summary, "security": [], "responses": {"200": {"description": "ok"}, "503": {"description": "not ready"}}}}
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "RelayRoom Knowledge Gateway",
            "version": __version__,
            "description": "A typed, provenance-tracked table of project facts behind a trust gate. "
            "Every error body is {\"error\": {\"code\", \"message\"}}.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR},
            "securitySchemes": {
                "projectToken": {"type": "http", "scheme": "bearer", "description": "a project token (relayroom token create)"},
                "ciToken": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT", "description": "a CI OIDC token"},
            },
        },
    }
