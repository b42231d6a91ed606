"""CI doors (docs/ci-attestations.md): OIDC attestations and signed webhooks.

    POST /v1/attestations        Authorization: Bearer <OIDC JWT>, body of 5.1
    POST /v1/webhooks/github     X-Hub-Signature-256, workflow_run / ping / check_run
    POST /v1/webhooks/{source}   Standard Webhooks, body of 5.1

The intake and what it needs (check maps, keys, the token verifier) are
built by the hub (`gateway/hub.py`); these handlers only read the request
and answer.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.ci.intake import AttestationIntake, read_statement
from gateway.core.errors import UnsupportedMedia
from gateway.core.jsonio import API_BODY_LIMIT
from gateway.web.inputs import WEBHOOK_BODY_LIMIT, bearer, hub_of, json_body, raw_body
from gateway.web.responses import JSONResponse


def _intake(request: Request) -> AttestationIntake:
    return hub_of(request).intake


async def post_attestation(request: Request) -> Response:
    token = bearer(request)
    body = await json_body(request, required=("check", "outcome"), optional=("project", "run_url"), limit=API_BODY_LIMIT)
    statement = read_statement(body)
    result = await _intake(request).from_token(token, statement)
    return JSONResponse(result, status_code=201)


def _require_json(request: Request) -> None:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise UnsupportedMedia("send the webhook as JSON (Content-Type: application/json)", code="unsupported_media_type")


async def post_github_webhook(request: Request) -> Response:
    # No Content-Type check: the signature covers the body, and a signed body
    # that is not JSON (a hook set to form encoding) is answered 400, saying so.
    raw = await raw_body(request, WEBHOOK_BODY_LIMIT)
    status, result = await hub_of(request).github_webhooks.deliver(request.headers, raw)
    return JSONResponse(result, status_code=status)


async def post_source_webhook(request: Request) -> Response:
    raw = await raw_body(request, WEBHOOK_BODY_LIMIT)
    _require_json(request)
    status, result = await _intake(request).from_source(request.path_params["source"], request.headers, raw)
    return JSONResponse(result, status_code=status)


routes = [
    Route("/v1/attestations", post_attestation, methods=["POST"]),
    Route("/v1/webhooks/github", post_github_webhook, methods=["POST"]),
    Route("/v1/webhooks/{source}", post_source_webhook, methods=["POST"]),
]
