"""`GET /docs`: the API reference for people, rendered from `/openapi.json`.

The page is drawn from the very document schemathesis fuzzes the gateway
with (gateway/web/openapi_spec.py), so it cannot describe an operation the
gateway does not serve.  It is server-rendered HTML with this origin's style
sheets only: no script, no CDN, the dashboard's Content-Security-Policy.
Anyone may read it, as anyone may read `/openapi.json`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.web.dashboard_base import context
from gateway.web.html import page
from gateway.web.session import load_session

S = dict[str, Any]

MAX_DEPTH = 3  # supports[].issuer is as deep as the document goes
SECURITY = {
    "projectToken": "a project token: Authorization: Bearer <token>",
    "ciToken": "the CI run's OIDC token: Authorization: Bearer <jwt>",
}
GROUPS = {  # the first path segment after /v1/projects/{project}/ -> a heading
    "entries": "Entries and the trust gate",
    "events": "Entries and the trust gate",
    "recall": "Recall",
    "recall_used": "Recall",
    "threads": "Threads and proposals",
    "proposals": "Threads and proposals",
    "playbook": "Playbook and settings",
    "settings": "Playbook and settings",
    "audit": "Audit and learning",
    "learning": "Audit and learning",
}


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool
    notes: str


@dataclass(frozen=True)
class Answer:
    status: str
    description: str
    media_type: str
    fields: list[Field]


@dataclass
class Operation:
    anchor: str
    method: str
    path: str
    summary: str
    description: str
    security: str
    parameters: list[Field] = field(default_factory=list)
    body_type: str = ""
    body: list[Field] = field(default_factory=list)
    success: list[Answer] = field(default_factory=list)
    refusals: list[Answer] = field(default_factory=list)


@dataclass
class Group:
    title: str
    anchor: str
    operations: list[Operation] = field(default_factory=list)


def _resolve(document: S, schema: S) -> S:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        resolved: S = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
        return resolved
    return schema


def type_text(schema: S) -> str:
    kind = schema.get("type", "any")
    if kind == "array":
        items = schema.get("items", {})
        kind = f"array of {items.get('type', 'any')}"
    elif kind == "string" and schema.get("format"):
        kind = f"string ({schema['format']})"
    return f"{kind} or null" if schema.get("nullable") else kind


def notes_text(schema: S) -> str:
    notes: list[str] = []
    if "enum" in schema:
        notes.append("one of " + ", ".join(str(v) for v in schema["enum"]))
    low, high = schema.get("minLength"), schema.get("maxLength")
    if low is not None and high is not None:
        notes.append(f"{low} to {high} characters")
    elif high is not None:
        notes.append(f"at most {high} characters")
    elif low:
        notes.append(f"at least {low} character{'s' if low != 1 else ''}")
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    if minimum is not None and maximum is not None and not schema.get("exclusiveMinimum"):
        notes.append(f"from {minimum:g} to {maximum:g}")
    elif minimum is not None:
        above = "above" if schema.get("exclusiveMinimum") else "at least"
        notes.append(f"{above} {minimum:g}" + (f", at most {maximum:g}" if maximum is not None else ""))
    elif maximum is not None:
        notes.append(f"at most {maximum:g}")
    if schema.get("description"):
        # A description says in words what a pattern beside it says in a regex.
        notes.append(str(schema["description"]))
    elif "pattern" in schema:
        notes.append(f"matches {schema['pattern']}")
    return "; ".join(notes)


def fields_of(document: S, schema: S | None, prefix: str = "", depth: int = 0) -> list[Field]:
    """An object schema as one row per field, nested fields as `a.b` and `a[].b`."""
    if not schema:
        return []
    schema = _resolve(document, schema)
    if isinstance(schema.get("oneOf"), list):
        return _alternatives(document, [_resolve(document, alt) for alt in schema["oneOf"]], prefix, depth)
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = set(schema.get("required", []))
    rows: list[Field] = []
    for name, sub in properties.items():
        sub = _resolve(document, sub)
        rows.append(Field(prefix + name, type_text(sub), name in required, notes_text(sub)))
        if depth + 1 < MAX_DEPTH:
            if sub.get("type") == "object":
                rows.extend(fields_of(document, sub, f"{prefix}{name}.", depth + 1))
            elif sub.get("type") == "array" and isinstance(sub.get("items"), dict):
                rows.extend(fields_of(document, sub["items"], f"{prefix}{name}[].", depth + 1))
    return rows


def _alternatives(document: S, shapes: list[S], prefix: str, depth: int) -> list[Field]:
    """The fields of a `oneOf` of object schemas told apart by an enum (the
    bulk body: `reason` is required when `action` is refute): each field
    once, an enum's values from every shape, and a field some shapes require
    and others do not noted with when it is required."""
    rows: dict[str, Field] = {}
    required_in: dict[str, list[S]] = {}
    for shape in shapes:
        for row in fields_of(document, shape, prefix, depth):
            rows.setdefault(row.name, row)
        for name in shape.get("required", []):
            required_in.setdefault(prefix + name, []).append(shape)
    # The fields every shape gives an enum tell the shapes apart: their values merged.
    enums: dict[str, list[Any]] = {}
    for name in shapes[0].get("properties", {}):
        per_shape = [shape.get("properties", {}).get(name, {}) for shape in shapes]
        if all("enum" in prop for prop in per_shape):
            enums[name] = [value for prop in per_shape for value in prop["enum"]]
    for name, values in enums.items():  # whether it is required is decided below, with the others
        sub = {**shapes[0]["properties"][name], "enum": values}
        rows[prefix + name] = Field(prefix + name, type_text(sub), False, notes_text(sub))
    for name, row in rows.items():
        holders = required_in.get(name, [])
        required = len(holders) == len(shapes)
        notes = row.notes
        if holders and not required:
            key = next(iter(enums), None)
            when = ", ".join(str(v) for shape in holders for v in shape["properties"][key]["enum"]) if key else ""
            note = f"required when {key} is {when}" if key else "required in some forms of the body"
            notes = f"{note}; {notes}" if notes else note
        rows[name] = Field(row.name, row.type, required, notes)
    return list(rows.values())


def _anchor(method: str, path: str) -> str:
    return method + "-" + re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def _group_title(path: str) -> str:
    match = re.match(r"^/v1/projects/\{project\}/([a-z_]+)", path)
    if match:
        return GROUPS.get(match.group(1), "Project")
    if path.startswith(("/v1/attestations", "/v1/webhooks")):
        return "CI attestations"
    return "Service"


def _security(path: str, schemes: list[str]) -> str:
    if schemes:
        return "; ".join(SECURITY.get(name, name) for name in schemes)
    if path.startswith("/v1/webhooks"):
        return "no bearer token: the body's signature (see the summary)"
    return "none"


def _responses(document: S, responses: S) -> tuple[list[Answer], list[Answer]]:
    success: list[Answer] = []
    refusals: list[Answer] = []
    for status, answer in responses.items():
        content = answer.get("content", {})
        media_type, schema = next(iter(content.items()), ("", {}))
        schema = schema.get("schema") if isinstance(schema, dict) else None
        is_error = status[0] in "45" and isinstance(schema, dict) and "$ref" in schema
        row = Answer(status, answer.get("description", ""), media_type, [] if is_error else fields_of(document, schema))
        (success if status[0] in "123" else refusals).append(row)
    return success, refusals


def reference(document: S) -> list[Group]:
    """The OpenAPI document as groups of operations, in the document's order."""
    groups: dict[str, Group] = {}
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            schemes = [name for need in op.get("security", []) for name in need]
            parameters = [
                Field(p["name"], f"{p['in']}: {type_text(p.get('schema', {}))}", bool(p.get("required")), notes_text(p.get("schema", {})))
                for p in op.get("parameters", [])
            ]
            body_type, body_schema = "", None
            if "requestBody" in op:
                body_type, media = next(iter(op["requestBody"]["content"].items()))
                body_schema = media.get("schema")
            success, refusals = _responses(document, op.get("responses", {}))
            operation = Operation(
                anchor=_anchor(method, path),
                method=method.upper(),
                path=path,
                summary=op.get("summary", ""),
                description=op.get("description", ""),
                security=_security(path, schemes),
                parameters=parameters,
                body_type=body_type,
                body=fields_of(document, body_schema),
                success=success,
                refusals=refusals,
            )
            title = _group_title(path)
            group = groups.setdefault(title, Group(title, "group-" + re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")))
            group.operations.append(operation)
    return list(groups.values())


async def api_docs(request: Request) -> Response:
    from gateway.web.openapi_spec import spec

    document = spec()
    session = await load_session(request)
    return page(
        "api_docs.html",
        await context(
            request,
            session,
            tab="docs",
            info=document["info"],
            groups=reference(document),
            error_fields=fields_of(document, document["components"]["schemas"]["Error"]),
        ),
    )


routes = [Route("/docs", api_docs, methods=["GET"])]
