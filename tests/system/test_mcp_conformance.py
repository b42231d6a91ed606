"""The official MCP conformance suite (`@modelcontextprotocol/conformance`,
`server --url`) against the live gateway: every scenario that applies to
this server passes, each of its checks SUCCESS (no failure, no warning).

Applies: initialize, ping, tools/list, a tool error (the suite calls a tool
this server does not have and must get `isError: true` with text, not a
protocol error), resources/list, prompts/list and the DNS-rebinding check
(a foreign `Host`/`Origin` refused, a loopback one accepted).

Does not apply, and is not run: the scenarios that call the suite's own
fixture tools, resources and prompts (`test_simple_text`, `test://static-text`,
`test_simple_prompt`, ...: a reference server's, not ours); logging,
completion and resource subscriptions (capabilities this server does not
advertise); sampling and elicitation (it never asks the client anything);
SSE polling and multiple streams (the endpoint is stateless, with no session
to resume).

The suite sends no credentials, so it talks to a loopback proxy that adds
the bearer header and passes everything else through, `Host` and `Origin`
included (tests/support/bearer_proxy.py).

`scripts/test` installs Node 22 and the suite into `.ci-work/` and sets
RELAYROOM_TEST_NODE_BIN and RELAYROOM_TEST_CONFORMANCE; without them the test
skips, unless RELAYROOM_REQUIRE_CONFORMANCE=1 (CI), where it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import LiveServer, ProjectTokens, live_setup, make_project
from tests.support.bearer_proxy import BearerProxy

SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
)


def conformance() -> tuple[str, dict[str, str]]:
    binary = os.environ.get("RELAYROOM_TEST_CONFORMANCE")
    node_bin = os.environ.get("RELAYROOM_TEST_NODE_BIN")
    if not binary or not node_bin or not os.path.exists(binary):
        message = "MCP conformance suite not installed: set RELAYROOM_TEST_CONFORMANCE and RELAYROOM_TEST_NODE_BIN (scripts/test does)"
        if os.environ.get("RELAYROOM_REQUIRE_CONFORMANCE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    env = dict(os.environ)
    env["PATH"] = f"{node_bin}{os.pathsep}{env.get('PATH', '')}"
    return binary, env


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_every_applicable_conformance_scenario_passes(live_server: LiveServer, tmp_path: Path) -> None:
    binary, env = conformance()  # skip before any setup when it is not installed
    tokens: ProjectTokens = live_setup(live_server, lambda hub: make_project(hub, "acme"))
    outcomes: dict[str, list[tuple[str, str, str]]] = {}
    with BearerProxy(live_server.url, tokens.reader) as proxy:
        for scenario in SCENARIOS:
            out = tmp_path / scenario
            done = subprocess.run(
                [binary, "server", "--url", f"{proxy.url}/mcp", "--scenario", scenario, "-o", str(out)],
                capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
            )
            files = list(out.glob("*/checks.json"))
            assert len(files) == 1, (scenario, done.returncode, done.stdout[-2000:], done.stderr[-2000:])
            checks = json.loads(files[0].read_text())
            outcomes[scenario] = [(c["id"], c["status"], c.get("errorMessage", "")) for c in checks]
            assert done.returncode == 0, (scenario, outcomes[scenario])
    for scenario, checks in outcomes.items():
        assert checks, scenario  # a scenario that checked nothing proves nothing
        assert all(status == "SUCCESS" for _, status, _ in checks), (scenario, checks)
    # The rebinding scenario really reached the gateway's own check both ways.
    assert {check for check, _, _ in outcomes["dns-rebinding-protection"]} == {
        "localhost-host-rebinding-rejected",
        "localhost-host-valid-accepted",
    }
