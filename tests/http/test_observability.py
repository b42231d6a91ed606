"""Observability: /metrics in Prometheus text, JSON logs that carry a request
id, and no secret in any log line or error body.

The metrics are read back through Prometheus' own text parser, so a
malformed exposition fails here before it fails a scraper.
"""

from __future__ import annotations

import io
import json
import logging
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.core.logs import JsonFormatter, TextFormatter
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding, learn as learn_direct, write_map
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import ProjectTokens, make_project
from tests.support.helpers import bearer, learn
from tests.support.oidc_issuer import OidcIssuer

ENTRIES = "/v1/projects/{project}/entries"
ENTRY = "/v1/projects/{project}/entries/{entry_id}"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient) -> Samples:
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Every log record of the process, formatted as production formats it
    (one JSON object per line), at DEBUG so nothing is filtered out."""
    yield from _captured(JsonFormatter())


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    """The same records as a terminal shows them (RELAYROOM_LOG_FORMAT=text)."""
    yield from _captured(TextFormatter())


def _captured(formatter: logging.Formatter) -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(formatter)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def log_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    lines = [line for line in buffer.getvalue().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


# -- /metrics -----------------------------------------------------------------------


async def test_requests_are_counted_by_route_template_and_status(
    client: httpx.AsyncClient, acme: ProjectTokens
) -> None:
    entry = await learn(client, "acme", acme.writer, "Metrics count routes, not paths.")
    await client.get(f"/v1/projects/acme/entries/{entry['id']}", headers=bearer(acme.reader))  # another's candidate: 404
    await client.get("/v1/projects/acme/entries")  # no token: 401
    for n in range(5):  # unknown paths must not each become a time series
        await client.get(f"/v1/nothing/{n}-kn_{n}")
    samples = await scrape(client)
    name = "relayroom_http_requests_total"
    assert value(samples, name, method="POST", route=ENTRIES, status="201") == 1
    assert value(samples, name, method="GET", route=ENTRY, status="404") == 1
    assert value(samples, name, method="GET", route=ENTRIES, status="401") == 1
    assert value(samples, name, method="GET", route="unmatched", status="404") == 5
    routes = {dict(labels)["route"] for (n, labels) in samples if n == name}
    assert not any("acme" in r or "kn_" in r for r in routes), routes  # no ids, no slugs: bounded cardinality
    assert value(samples, "relayroom_http_request_seconds_count", route=ENTRIES) == 2  # the POST and the GET


async def test_recall_latency_is_a_histogram(client: httpx.AsyncClient, acme: ProjectTokens) -> None:
    before = await scrape(client)
    for q in ("migrations", "pooler", "naming"):
        r = await client.get("/v1/projects/acme/recall", params={"q": q}, headers=bearer(acme.reader))
        assert r.status_code == 200
    refused = await client.get("/v1/projects/acme/recall", params={"q": "x" * 2001}, headers=bearer(acme.reader))
    assert refused.status_code == 422
    after = await scrape(client)
    count = "relayroom_recall_seconds_count"
    assert value(after, count) - value(before, count) == 3  # refused recalls are not timed
    buckets = sorted(
        (float(dict(labels)["le"]), v) for (n, labels), v in after.items() if n == "relayroom_recall_seconds_bucket"
    )
    assert buckets[-1] == (float("inf"), value(after, count))
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    assert 0 < value(after, "relayroom_recall_seconds_sum") < 3 * 5


async def test_owner_promotions_and_contradictions_are_counted(
    client: httpx.AsyncClient, hub: Any, acme: ProjectTokens
) -> None:
    first = await learn(client, "acme", acme.writer, "Confirmed by the owner.")
    second = await learn(client, "acme", acme.writer, "Refuted by the owner.")
    assert (await client.post(f"/v1/projects/acme/entries/{first['id']}/confirm", headers=bearer(acme.owner))).status_code == 200
    again = await client.post(f"/v1/projects/acme/entries/{first['id']}/confirm", headers=bearer(acme.owner))
    assert again.status_code == 409  # refused: not counted
    samples = await scrape(client)
    assert value(samples, "relayroom_promotions_total", by="owner") == 1
    assert value(samples, "relayroom_contradictions_total") == 0

    report = {"type": "error", "detail": {"contradicts": first["id"]}}
    assert (await client.post("/v1/projects/acme/events", json=report, headers=bearer(acme.other_writer))).json()["effect"] == "contradicted"
    assert (await client.post("/v1/projects/acme/events", json=report, headers=bearer(acme.other_writer))).json()["effect"] == "duplicate"
    refute = await client.post(f"/v1/projects/acme/entries/{second['id']}/refute", json={"reason": "wrong"}, headers=bearer(acme.owner))
    assert refute.status_code == 200
    note = await client.post("/v1/projects/acme/events", json={"type": "note", "detail": {}}, headers=bearer(acme.writer))
    assert note.json()["effect"] == "none"
    samples = await scrape(client)
    assert value(samples, "relayroom_contradictions_total") == 2


async def test_attestations_promotions_and_jwks_fetches_are_counted(
    client: httpx.AsyncClient, hub: Any, checkmap_dir: Path, issuer: OidcIssuer, gitlab_issuer: OidcIssuer
) -> None:
    await make_project(hub, "acme")
    entry_id = await learn_direct(hub, "acme", "Migrations run in one transaction.")
    bindings = github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url)
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", bindings, {"migrations": [entry_id]}))
    now = time.time()

    async def attest(token: str, check: str, outcome: str) -> dict[str, Any]:
        r = await client.post("/v1/attestations", json={"check": check, "outcome": outcome}, headers=bearer(token))
        assert r.status_code == 201, r.text
        return r.json()

    await attest(issuer.github_token(now), "migrations", "success")
    await attest(issuer.github_token(now), "docs", "success")  # unmapped: counted false
    await attest(issuer.github_token(now), "migrations", "failure")  # not_success: counted false
    promoted = await attest(gitlab_issuer.gitlab_token(now), "migrations", "success")
    assert promoted["promoted"] == [entry_id]
    samples = await scrape(client)
    name = "relayroom_attestations_total"
    assert value(samples, name, outcome="success", counted="true") == 2
    assert value(samples, name, outcome="success", counted="false") == 1
    assert value(samples, name, outcome="failure", counted="false") == 1
    assert value(samples, "relayroom_promotions_total", by="issuers") == 1
    assert value(samples, "relayroom_jwks_fetches_total", result="ok") == 2  # one per issuer, then cached


# -- logs -----------------------------------------------------------------------------


async def test_every_log_line_of_a_request_carries_its_id(
    client: httpx.AsyncClient, json_log: io.StringIO, hub: Any, checkmap_dir: Path, issuer: OidcIssuer
) -> None:
    await make_project(hub, "acme")
    entry_id = await learn_direct(hub, "acme", "Logs carry the request id.")
    await write_map(hub, checkmap_dir, "acme.yaml", checkmap("acme", github_binding(issuer.url), {"unit": [entry_id]}))
    ids = set()
    for _ in range(3):
        r = await client.get("/healthz")
        ids.add(r.headers["x-request-id"])
    assert len(ids) == 3  # one id per request
    r = await client.post("/v1/attestations", json={"check": "unit", "outcome": "success"},
                          headers=bearer(issuer.github_token(time.time())))
    assert r.status_code == 201, r.text
    request_id = r.headers["x-request-id"]
    lines = log_lines(json_log)
    mine = [line for line in lines if line.get("request_id") == request_id]
    loggers = {line["logger"] for line in mine}
    # The JWKS fetch and the access line both say which request they belong to.
    assert {"relayroom.access", "relayroom.oidc"} <= loggers, mine
    access = next(line for line in mine if line["logger"] == "relayroom.access")
    assert (access["route"], access["status"], access["method"]) == ("/v1/attestations", 201, "POST")
    # The attestation's facts ride on its access line: one line per request.
    assert (access["project"], access["check"], access["counted"]) == ("acme", "unit", True), access
    assert access["issuer"].startswith("oidc:") and access["issuer"].endswith(":acme"), access
    assert "relayroom.attestations" not in loggers, mine
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
    assert {line["request_id"] for line in lines if line["logger"] == "relayroom.access"} >= ids


async def test_a_delivery_that_records_for_two_projects_logs_the_facts_of_both(
    client: httpx.AsyncClient, json_log: io.StringIO, hub: Any, checkmap_dir: Path, issuer: OidcIssuer
) -> None:
    """An attestation's facts ride on its request's access line; a second
    attestation of the same request (a workflow_run delivery for a
    repository that two projects share) keeps a line of its own."""
    from dataclasses import replace

    from gateway.ci import webhook_signatures as sig
    from gateway.core.config import Secret

    hub.config = replace(hub.config, github_webhook_secret=Secret("hub-wide-secret"))
    hub.intake.config = hub.config  # the intake was built with the config it reads
    for slug, other in (("acme", "globex"), ("globex", "acme")):
        await make_project(hub, slug)
        entry_id = await learn_direct(hub, slug, f"Migrations of {slug} run in staging first.")
        await write_map(hub, checkmap_dir, f"{slug}.yaml", checkmap(
            slug, github_binding(issuer.url, extra=f"    github_app: true\n    shared_with: [{other}]"),
            {"migrations": [entry_id]}))
    run = {"id": 9, "run_attempt": 1, "name": "migrations", "conclusion": "success", "event": "push",
           "head_branch": "main", "head_sha": "abc", "path": ".github/workflows/ci.yml",
           "head_repository": {"id": 123456}}
    raw = json.dumps({"action": "completed", "workflow_run": run,
                      "repository": {"id": 123456, "full_name": "acme/api", "owner": {"id": 7890}}}).encode()
    r = await client.post("/v1/webhooks/github", content=raw, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "workflow_run", "X-GitHub-Delivery": "x",
        "X-Hub-Signature-256": sig.github_sign("hub-wide-secret", raw), "X-GitHub-Enterprise-Host": issuer.host})
    assert r.status_code == 201, r.text
    assert sorted(a["project"] for a in r.json()["attestations"]) == ["acme", "globex"]
    mine = [line for line in log_lines(json_log) if line.get("request_id") == r.headers["x-request-id"]]
    noted = sorted((line["logger"], line["project"]) for line in mine if "project" in line)
    assert sorted(project for _, project in noted) == ["acme", "globex"], mine
    assert {logger for logger, _ in noted} == {"relayroom.access", "relayroom.attestations"}, mine
    assert all(line["check"] == "migrations" and line["counted"] is True for line in mine if "project" in line)


async def test_no_secret_reaches_a_log_line_or_an_error_body(
    client: httpx.AsyncClient, hub: Any, acme: ProjectTokens, json_log: io.StringIO, text_log: io.StringIO,
    caplog: pytest.LogCaptureFixture, issuer: OidcIssuer,
) -> None:
    caplog.set_level(logging.DEBUG)
    other = await make_project(hub, "globex")
    revoked = await hub.accounts.create_token("acme", "write", "agent-gone")
    await hub.accounts.revoke_tokens("acme", "agent-gone")
    forged = "rr_" + "S3cr3tF0rg3d" * 4
    foreign_jwt = issuer.github_token(time.time())  # a real signed token from an issuer no check map binds
    secrets = [acme.writer, acme.reader, acme.owner, revoked, forged, other.writer, foreign_jwt]

    async def send(method: str, path: str, token: str | None, *, header: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if header is not None:
            headers["Authorization"] = header
        elif token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return await client.request(method, path, headers=headers, **kwargs)

    mcp_headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    learn_call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "learn", "arguments": {"kind": "fact", "statement": "Readers cannot learn."}}}
    responses = [
        await send("POST", "/v1/projects/acme/entries", acme.writer, json={"kind": "fact", "statement": "Secrets stay out of logs."}),
        await send("POST", "/v1/projects/acme/entries", acme.reader, json={"kind": "fact", "statement": "x"}),  # 403
        await send("GET", "/v1/projects/acme/recall?q=secrets", forged),  # 401
        await send("GET", "/v1/projects/acme/recall?q=secrets", revoked),  # 401
        await send("GET", "/v1/projects/acme/recall?q=secrets", other.writer),  # 404: another project's token
        await send("GET", "/v1/projects/acme/audit", acme.writer),  # 403
        await send("GET", "/v1/projects/acme/entries", None, header=f"Basic {acme.owner}"),  # 401: wrong scheme
        await send("GET", "/v1/projects/acme/entries", None, header=f"Bearer {acme.owner}{'x' * 17000}"),  # 431
        await send("POST", "/v1/projects/acme/entries", acme.writer, content=f'{{"kind": "fact", "statement": "{acme.owner}"'.encode(),
                   headers={"Content-Type": "application/json"}),  # 400: the secret inside malformed JSON
        await send("POST", "/v1/attestations", acme.writer, json={"check": "unit", "outcome": "success"}),  # 401 malformed JWT
        await send("POST", "/v1/attestations", foreign_jwt, json={"check": "unit", "outcome": "success"}),  # 401 unknown issuer
        await send("POST", "/mcp", forged, json=learn_call, headers=mcp_headers),  # 401
        await send("POST", "/mcp", acme.reader, json=learn_call, headers=mcp_headers),  # tool error
    ]
    statuses = [r.status_code for r in responses]
    assert statuses[:8] == [201, 403, 401, 401, 404, 403, 401, 431], statuses
    assert statuses[8:12] == [400, 401, 401, 401], statuses
    assert responses[12].status_code == 200 and responses[12].json()["result"]["isError"] is True

    for r in responses:
        exposed = r.text + " ".join(f"{k}: {v}" for k, v in r.headers.items())
        for secret in secrets:
            assert secret not in exposed, (r.request.url.path, r.status_code)
            assert secret[:24] not in exposed  # not even a prefix
    written = json_log.getvalue() + text_log.getvalue()
    assert json_log.getvalue() and text_log.getvalue(), "nothing was logged: the check would be empty"
    records = " ".join(repr(vars(record)) for record in caplog.records)
    for secret in secrets:
        assert secret[:24] not in written
        assert secret[:24] not in records  # not in any field a differently configured handler could print


def test_a_real_servers_log_is_json_lines_with_request_ids_and_no_secret(tmp_path: Path) -> None:
    """`relayroom serve` as deployed: stderr is one JSON object per line
    (uvicorn's own lines included), each request's id is in it, and no token
    reaches it, whichever layer refuses the request."""
    import asyncio
    import os
    import socket

    from tests.system.test_crash import REPO, ServeProcess
    from tests.http.test_limits import _seed

    database_url = f"sqlite:///{tmp_path / 'relayroom.db'}"
    token = asyncio.run(_seed(database_url))
    env = {**os.environ, "RELAYROOM_DATABASE_URL": database_url, "RELAYROOM_CHECKMAPS": str(tmp_path),
           "RELAYROOM_SWEEP_INTERVAL": "0", "RELAYROOM_LOG_LEVEL": "debug", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    server = ServeProcess(env, tmp_path / "serve.log")
    request_ids = []
    try:
        asyncio.run(server.wait_ready())
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for headers, path in [
                (bearer(token), "/v1/projects/acme/entries"),
                (bearer(token + "x"), "/v1/projects/acme/recall?q=logs"),  # 401: almost the token
                (bearer(token + "x" * 17_000), "/v1/projects/acme/entries"),  # 431 from the middleware
                ({"Authorization": f"Basic {token}"}, "/v1/projects/acme/entries"),
            ]:
                answer = http.get(path, headers=headers)
                assert answer.status_code in (200, 401, 431), answer.text
                if answer.status_code != 431:  # refused before an id is given
                    request_ids.append(answer.headers["x-request-id"])
        for raw in (  # refused by the HTTP protocol layer, before the app
            b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"a" * 140_000 + b"\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization " + token.encode() + b"\r\n\r\n",
        ):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                try:
                    sock.sendall(raw)
                    sock.recv(4096)
                except (ConnectionResetError, BrokenPipeError):
                    pass
    finally:
        server.stop()
    text = (tmp_path / "serve.log").read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    assert len(lines) >= 8
    logged_ids = {line.get("request_id") for line in lines}
    assert set(request_ids) <= logged_ids
    assert token[:20] not in text


# -- OpenTelemetry on the MCP door ---------------------------------------------------


class _InstalledProvider:
    """Stands for an OpenTelemetry SDK's provider: anything but the API's own."""


def test_only_an_installed_tracer_provider_counts_as_tracing() -> None:
    from opentelemetry import trace

    from gateway.mcp.server import tracing_configured

    assert not tracing_configured(trace.ProxyTracerProvider())
    assert not tracing_configured(trace.NoOpTracerProvider())
    assert tracing_configured(_InstalledProvider())


def test_untraced_drops_the_sdks_span_middleware_and_keeps_the_rest() -> None:
    from mcp.server import MCPServer
    from mcp.server._otel import OpenTelemetryMiddleware

    from gateway.mcp.server import untraced

    server: MCPServer[Any] = MCPServer("t")
    before = list(server.middleware)
    assert any(isinstance(m, OpenTelemetryMiddleware) for m in before)
    untraced(server)
    assert server.middleware == [m for m in before if not isinstance(m, OpenTelemetryMiddleware)]
    assert server.middleware  # the SDK's request-state check stays


@pytest.mark.parametrize("installed", [False, True])
async def test_the_mcp_door_keeps_spans_only_when_tracing_is_installed(
    hub: Any, monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    """Decided when the app is built: no provider installed, no span
    middleware (it would record nothing, at 40-60 us a call); a provider
    installed first (opentelemetry-instrument), the SDK's spans stay."""
    from opentelemetry import trace

    from gateway.mcp import server as mcp_server

    if installed:
        monkeypatch.setattr(trace, "get_tracer_provider", lambda: _InstalledProvider())
    dropped: list[Any] = []
    real = mcp_server.untraced
    monkeypatch.setattr(mcp_server, "untraced", lambda s: dropped.append(s) or real(s))
    mcp_server.build_mcp_app(hub)
    assert len(dropped) == (0 if installed else 1)
