"""Hypothesis against the MCP door: any JSON as tool arguments, over HTTP.

Raw JSON-RPC `tools/call` POSTs go to `/mcp` on a real uvicorn server on
127.0.0.1, with a read, a write and an owner token of a seeded project.
Arguments are any JSON value (nested, NaN and infinities included), strings
up to past the body limit, known argument names with wrong types, missing
ones and extra ones; the tool name is sometimes not a tool at all.

What must hold for every call:

- never a 5xx, never an error logged by the server (no crash inside a tool
  or the transport), and the server still answers afterwards;
- a JSON answer: a JSON-RPC response with this call's id, where a refused
  call is a tool error (`isError: true`) or a JSON-RPC error, never a
  success that hides a failure; an HTTP refusal (oversized body) carries the
  contract's error body;
- no entry becomes trusted, and no promotion is written to the ledger.

Bounded and deterministic: MAX_EXAMPLES calls, `derandomize=True`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Iterator

import httpx
import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st

from gateway.core.clock import SystemClock
from gateway.core.config import Config
from gateway.core.visible import first_invisible
from gateway.hub import Hub
from gateway.web.app import build_app
from tests.conftest import LiveServer

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 600
TOOLS = {
    "recall": ("query", "kind", "limit"),
    "learn": ("kind", "statement", "evidence", "ttl_days"),
    "recall_used": ("recall_id", "entry_id"),
    "report_error": ("contradicts", "detail"),
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Gateway:
    def __init__(self, server: LiveServer, hub: Hub, tokens: dict[str, str], ids: list[str], recall_ids: list[str]) -> None:
        self.server, self.hub, self.tokens, self.ids, self.recall_ids = server, hub, tokens, ids, recall_ids

    def read(self, sql: str) -> list[dict[str, Any]]:
        assert self.hub.loop is not None
        coro = self.hub.driver.read(lambda q: q.tx.all(sql))
        return asyncio.run_coroutine_threadsafe(coro, self.hub.loop).result(30)


async def _seed(hub: Hub) -> tuple[dict[str, str], list[str], list[str]]:
    await hub.accounts.create_project("acme")
    tokens = {level: await hub.accounts.create_token("acme", level, f"{level}-1") for level in ("read", "write", "owner")}
    writer = await hub.accounts.authenticate(tokens["write"])
    owner = await hub.accounts.authenticate(tokens["owner"])
    ids = []
    for i, statement in enumerate(["Deploys happen on Tuesdays.", "The cache key includes the locale.", "Logs are JSON.", "Never force-push main."]):
        entry, _ = await hub.knowledge.learn(writer if i % 2 else owner, "convention", statement)
        ids.append(entry.id)
    await hub.knowledge.confirm(owner, ids[0])
    await hub.knowledge.confirm(owner, ids[1])
    reader = await hub.accounts.authenticate(tokens["read"])
    recall_ids = [(await hub.recall.recall(reader, q, via="mcp"))[0] for q in ("deploys tuesday", "cache locale")]
    return tokens, ids, recall_ids


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder: Path = tmp_path_factory.mktemp("fuzz_mcp")
    (folder / "checkmaps").mkdir()
    config = Config.from_env(
        {}, database_url=f"sqlite:///{folder / 'relayroom.db'}", checkmaps=str(folder / "checkmaps"), sweep_interval=0.0
    )
    hub = Hub(config, clock=SystemClock())
    with LiveServer(build_app(hub)) as server:
        assert hub.loop is not None
        tokens, ids, recall_ids = asyncio.run_coroutine_threadsafe(_seed(hub), hub.loop).result(30)
        yield Gateway(server, hub, tokens, ids, recall_ids)


class ErrorLog(logging.Handler):
    """Every record at ERROR or above, from any logger of the process."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


# -- strategies ---------------------------------------------------------------------------

SIZES = st.sampled_from([0, 1, 99, 100, 101, 1999, 2000, 2001, 7999, 8000, 8001, 40_000, 70_000])
huge_strings = st.builds(lambda n, c: c * n, SIZES, st.sampled_from(["x", "é", "\x00", " ", "🚀", "\u202e"]))
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=50)
    | huge_strings
)
any_json = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)


def argument_values(gw: Gateway) -> st.SearchStrategy[Any]:
    """Plausible values (kinds, ids, numbers at the edges) mixed with any JSON."""
    plausible = st.sampled_from(
        ["fact", "convention", "pitfall", "decision", "trusted", "candidate", *gw.ids, *gw.recall_ids,
         "kn_unknown", 0, -1, 1, 10, 50, 51, 36500, 36501, 1e-300, 1e308, True, "owner:olivia"]
    )
    return plausible | any_json


KINDS = st.sampled_from(["fact", "convention", "pitfall", "decision"])
TEXT = st.text(min_size=1, max_size=120).filter(lambda t: t.strip() and first_invisible(t) is None)


def valid_arguments(gw: Gateway) -> dict[str, dict[str, st.SearchStrategy[Any]]]:
    """What a well-behaved agent sends, per tool and argument."""
    return {
        "recall": {"query": st.text(max_size=100), "kind": st.none() | KINDS, "limit": st.integers(1, 50)},
        "learn": {
            "kind": KINDS,
            "statement": TEXT,
            "evidence": st.none() | TEXT,
            "ttl_days": st.none() | st.floats(min_value=0.01, max_value=36500),
        },
        "recall_used": {"recall_id": st.sampled_from(gw.recall_ids), "entry_id": st.sampled_from(gw.ids)},
        "report_error": {"contradicts": st.sampled_from(gw.ids + ["kn_unknown"]), "detail": TEXT},
    }


@st.composite
def tool_calls(draw: st.DrawFn, gw: Gateway) -> dict[str, Any]:
    """A third well-formed, a third with one argument broken (wrong type,
    missing, or an extra field), a third anything at all."""
    name = draw(st.text(max_size=20)) if draw(st.integers(0, 9)) == 0 else draw(st.sampled_from(sorted(TOOLS)))
    shape = draw(st.sampled_from(["valid", "broken", "wild"]))
    values = argument_values(gw)
    valid = valid_arguments(gw).get(name, {})
    arguments: Any
    if shape == "wild" or not valid:
        arguments = {arg: draw(values) for arg in TOOLS.get(name, ()) if draw(st.integers(0, 3))}  # most present
        arguments.update(draw(st.dictionaries(st.text(max_size=12), values, max_size=3)))
        if draw(st.integers(0, 4)) == 0:
            arguments = draw(any_json)  # not even an object
    else:
        required = {"recall": ("query",), "learn": ("kind", "statement"), "recall_used": ("recall_id", "entry_id"),
                    "report_error": ("contradicts", "detail")}[name]
        arguments = {arg: draw(strategy) for arg, strategy in valid.items() if arg in required or draw(st.booleans())}
        if shape == "broken":
            how = draw(st.sampled_from(["retype", "drop", "extra"]))
            target = draw(st.sampled_from(sorted(valid)))
            if how == "retype":
                arguments[target] = draw(values)
            elif how == "drop":
                arguments.pop(target, None)
            else:
                field = draw(st.sampled_from(["state", "trusted", "promoted_by", "supports", "project", "level", "issuer"]))
                arguments[field] = draw(values)
    return {"jsonrpc": "2.0", "id": draw(st.integers(1, 10**6)), "method": "tools/call", "params": {"name": name, "arguments": arguments}}


# -- the test -----------------------------------------------------------------------------------


def _body(call: dict[str, Any]) -> bytes:
    # NaN and the infinities go out as the bare words Python writes: hostile, not JSON.
    return json.dumps(call, allow_nan=True).encode()


def check_answer(call: dict[str, Any], response: httpx.Response) -> str:
    where = f"{call['params']['name']!r} -> {response.status_code}: {response.text[:300]}"
    assert response.status_code < 500, where
    body = response.json()  # always JSON, whoever answers
    if response.status_code >= 400:
        if isinstance(body, dict) and "error" in body and "jsonrpc" not in body:
            error = body["error"]
            assert isinstance(error.get("code"), str) and isinstance(error.get("message"), str), where
            return f"http {response.status_code} {error['code']}"
        assert body.get("jsonrpc") == "2.0" and isinstance(body["error"]["code"], int), where
        return f"http {response.status_code} jsonrpc"
    assert response.status_code == 200, where
    assert body.get("jsonrpc") == "2.0", where
    if "error" in body:
        assert isinstance(body["error"]["code"], int) and isinstance(body["error"]["message"], str), where
        return "jsonrpc error"
    assert body["id"] == call["id"], where
    result = body["result"]
    assert isinstance(result["isError"], bool) and isinstance(result["content"], list), where
    if result["isError"]:
        return "tool error"
    assert call["params"]["name"] in TOOLS, where  # only a real tool can succeed
    assert isinstance(result.get("structuredContent"), dict), where
    return "ok"


def test_any_tool_arguments_at_every_level(gateway: Gateway) -> None:
    trusted_before = {r["id"] for r in gateway.read("SELECT id FROM entries WHERE state = 'trusted'")}
    promotions_before = gateway.read("SELECT COUNT(*) AS n FROM audit WHERE action IN ('promote', 'override')")[0]["n"]
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)
    outcomes: dict[str, int] = {}
    clients = {
        level: httpx.Client(base_url=gateway.server.url, headers={**HEADERS, "Authorization": f"Bearer {token}"}, timeout=20)
        for level, token in gateway.tokens.items()
    }

    @given(call=tool_calls(gateway), level=st.sampled_from(["read", "write", "write", "owner"]))
    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(call: dict[str, Any], level: str) -> None:
        response = clients[level].post("/mcp", content=_body(call))
        kind = check_answer(call, response)
        key = f"{level} {call['params']['name'] if call['params']['name'] in TOOLS else '?'} {kind}"
        outcomes[key] = outcomes.get(key, 0) + 1

    try:
        run()
    finally:
        logging.getLogger().removeHandler(errors)
        for client in clients.values():
            client.close()
    for key in sorted(outcomes):
        print(f"{key:40} x{outcomes[key]}")

    assert errors.records == [], [f"{r.name}: {r.getMessage()[:300]}" for r in errors.records]
    assert httpx.get(f"{gateway.server.url}/healthz").status_code == 200
    # The fuzz reached the tools: successes and tool errors both happened.
    assert any(k.endswith(" ok") for k in outcomes) and any(k.endswith("tool error") for k in outcomes)
    # Nothing an agent sends makes an entry trusted (report_error may demote).
    trusted_after = {r["id"] for r in gateway.read("SELECT id FROM entries WHERE state = 'trusted'")}
    assert trusted_after <= trusted_before
    promotions_after = gateway.read("SELECT COUNT(*) AS n FROM audit WHERE action IN ('promote', 'override')")[0]["n"]
    assert promotions_after == promotions_before
