"""The few typed errors of the gateway, each carrying the contract's code.

    GatewayError                      status, code, message, extra fields
    ├── BadRequest          400       malformed input
    ├── Unauthorized        401       no or bad credential
    ├── Forbidden           403       credential fine, level or binding too weak
    ├── NotFound            404       unknown, or not visible to this caller
    ├── Conflict            409       state conflict (blocked, replayed, decided)
    ├── PayloadTooLarge     413       body or header over its limit
    ├── UnsupportedMedia    415       not JSON
    ├── Invalid             422       well-formed but invalid
    ├── RateLimited         429       with Retry-After
    └── Unavailable         503       a dependency is down, with Retry-After

The web layer maps all of them to one JSON body in one place
(`gateway.web.errors`); the MCP layer turns them into tool errors; the CLI
prints the message as the last line of stderr.  Messages are for people: they
say what to do next and never echo a secret.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    status: int = 400
    default_code: str = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.extra = dict(extra or {})
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class BadRequest(GatewayError):
    status = 400
    default_code = "malformed_request"


class Unauthorized(GatewayError):
    status = 401
    default_code = "invalid_credential"


class Forbidden(GatewayError):
    status = 403
    default_code = "forbidden"


class NotFound(GatewayError):
    status = 404
    default_code = "not_found"


class Conflict(GatewayError):
    status = 409
    default_code = "conflict"


class PayloadTooLarge(GatewayError):
    status = 413
    default_code = "body_too_large"


class UnsupportedMedia(GatewayError):
    status = 415
    default_code = "unsupported_media_type"


class Invalid(GatewayError):
    status = 422
    default_code = "invalid_field"


class RateLimited(GatewayError):
    status = 429
    default_code = "rate_limited"


class Unavailable(GatewayError):
    status = 503
    default_code = "unavailable"
