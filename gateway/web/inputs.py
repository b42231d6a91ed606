"""Reading what a request carries: the bearer token, a bounded JSON body,
and query parameters, each refused with the contract's code when wrong."""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing import Any, Iterable

from starlette.requests import Request

from gateway.core import jsonio
from gateway.core.jsonio import API_BODY_LIMIT
from gateway.core.errors import BadRequest, Invalid, NotFound, PayloadTooLarge, Unauthorized, UnsupportedMedia
from gateway.knowledge.model import Principal

WEBHOOK_BODY_LIMIT = 1024 * 1024


if TYPE_CHECKING:
    from gateway.hub import Hub


def hub_of(request: Request) -> "Hub":
    """The hub the app was built around: every door reads its services from it."""
    hub: Hub = request.app.state.hub
    return hub


def bearer(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized("send Authorization: Bearer <token>", code="missing_credential")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'", code="missing_credential")
    return value.strip()


async def principal_for(request: Request, project_slug: str | None = None) -> Principal:
    principal = await hub_of(request).accounts.authenticate(bearer(request))
    if project_slug is not None and principal.project.slug != project_slug:
        # A token of project A is worth nothing in B: answer as if B did not exist.
        raise NotFound(f"no project {project_slug!r}", code="project_not_found")
    request.state.principal = principal.name
    return principal


async def raw_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise PayloadTooLarge(f"the body is over the {limit // 1024} KiB limit", code="body_too_large")
        except ValueError:
            raise BadRequest("Content-Length is not a number", code="malformed_request") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is over the {limit // 1024} KiB limit", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def json_body(
    request: Request,
    *,
    required: Iterable[str] = (),
    optional: Iterable[str] = (),
    limit: int = API_BODY_LIMIT,
    allow_empty: bool = False,
) -> dict[str, Any]:
    raw = await raw_body(request, limit)
    if not raw.strip() and allow_empty:
        return {}
    if not _is_json(request.headers.get("content-type", "")):
        raise UnsupportedMedia("send a JSON body with Content-Type: application/json", code="unsupported_media_type")
    try:
        body = jsonio.loads(raw)
    except ValueError:  # orjson's error is one: malformed, NaN, a lone surrogate, not UTF-8, too deep
        raise BadRequest("the body is not valid JSON", code="malformed_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="malformed_json")
    required = tuple(required)
    allowed = set(required) | set(optional)
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Invalid(
            f"unknown field {unknown[0]!r}; this endpoint accepts {', '.join(sorted(allowed)) or 'no fields'}",
            code="unknown_field",
            extra={"field": unknown[0]},
        )
    for name in required:
        if name not in body:
            raise Invalid(f"missing required field {name!r}", code="missing_field", extra={"field": name})
    return body


def query_int(request: Request, name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Invalid(f"{name} must be an integer from {minimum} to {maximum}", code=f"invalid_{name}") from None
    if not minimum <= value <= maximum:
        raise Invalid(f"{name} must be an integer from {minimum} to {maximum}", code=f"invalid_{name}")
    return value


def query_str(request: Request, name: str, max_len: int = 2000) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_len:
        raise Invalid(f"{name} is longer than {max_len} characters", code=f"invalid_{name}")
    return raw
