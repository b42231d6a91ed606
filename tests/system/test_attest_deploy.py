"""The CI-side scripts of deploy/ run for real: the GitHub composite action's
step (with a stand-in for GitHub's token endpoint) and the GitLab template's
script post to a live gateway, and retry on 503 with Retry-After."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import live_setup, make_project
from tests.support.oidc_issuer import OidcIssuer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None, reason="needs bash and curl")


class Stub:
    """A tiny HTTP server answering from a list of (status, headers, body)."""

    def __init__(self, answers: list[tuple[int, dict[str, str], dict[str, Any]]]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                stub.requests.append((self.path, dict(self.headers), self.rfile.read(length)))
                status, headers, body = stub.answers[min(len(stub.requests), len(stub.answers)) - 1]
                raw = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(raw))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def action_script() -> str:
    action = yaml.safe_load((ROOT / "deploy" / "github-action" / "action.yml").read_text())
    [step] = action["runs"]["steps"]
    return step["run"]


def gitlab_script() -> str:
    template = yaml.safe_load((ROOT / "deploy" / "gitlab" / "relayroom-attest.gitlab-ci.yml").read_text())
    return "\n".join(template[".relayroom-attest"]["script"])


def run_action(tmp_path: Path, gateway: str, token_endpoint: str, **inputs: str) -> tuple[subprocess.CompletedProcess[str], str]:
    output = tmp_path / "github_output"
    output.write_text("")
    env = {
        "PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output),
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{token_endpoint}/token?api-version=2.0",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "runner-request-token",
        "RELAYROOM_URL": gateway, "RELAYROOM_CHECK": inputs.get("check", "migrations"),
        "RELAYROOM_OUTCOME": inputs.get("outcome", "success"), "RELAYROOM_PROJECT": inputs.get("project", ""),
        "RELAYROOM_AUDIENCE": "relayroom", "RELAYROOM_ATTEMPTS": "3",
        "RELAYROOM_RUN_URL": "https://github.com/acme/api/actions/runs/1/attempts/1",
    }
    result = subprocess.run(["bash", "-c", action_script()], env=env, capture_output=True, text=True, timeout=60)
    return result, output.read_text()


@pytest.fixture
def token_stub(issuer: OidcIssuer) -> Iterator[Stub]:
    stub = Stub([(200, {}, {"count": 1, "value": issuer.github_token(time.time())})])
    yield stub
    stub.close()


def test_the_github_action_step_attests_and_the_gitlab_template_promotes(
    live_server: Any, checkmap_dir: Path, issuer: OidcIssuer, gitlab_issuer: OidcIssuer, token_stub: Stub, tmp_path: Path
) -> None:
    async def setup(hub: Any) -> str:
        await make_project(hub, "acme")
        from tests.support.attest_fixtures import learn

        entry = await learn(hub, "acme", "Migrations run in staging first.")
        (checkmap_dir / "acme.yaml").write_text(checkmap(
            "acme", github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url), {"migrations": [entry]}))
        await hub.checkmaps.refresh(hub.driver)
        return entry

    entry = live_setup(live_server, setup)
    result, outputs = run_action(tmp_path, live_server.url, token_stub.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "counted=true" in outputs and "attestation-id=at_" in outputs
    assert "::add-mask::" in result.stdout
    path, headers, _ = token_stub.requests[0]
    assert "audience=relayroom" in path and headers["Authorization"] == "bearer runner-request-token"

    env = {"PATH": os.environ["PATH"], "RELAYROOM_URL": live_server.url, "RELAYROOM_CHECK": "migrations",
           "RELAYROOM_OUTCOME": "success", "RELAYROOM_PROJECT": "", "RELAYROOM_ATTEMPTS": "3",
           "RELAYROOM_ID_TOKEN": gitlab_issuer.gitlab_token(time.time()), "CI_JOB_URL": "https://gitlab.example.com/j/1"}
    gitlab = subprocess.run(["sh", "-c", gitlab_script()], env=env, capture_output=True, text=True, timeout=60)
    assert gitlab.returncode == 0, gitlab.stdout + gitlab.stderr
    assert json.loads(gitlab.stdout.strip().splitlines()[-1])["promoted"] == [entry]


def test_the_github_action_retries_on_503_with_retry_after(token_stub: Stub, tmp_path: Path) -> None:
    gateway = Stub([
        (503, {"Retry-After": "0"}, {"error": {"code": "jwks_unavailable", "message": "retry"}}),
        (201, {}, {"attestation_id": "at_1", "counted": False, "reason": "unmapped_check"}),
    ])
    try:
        result, outputs = run_action(tmp_path, gateway.url, token_stub.url, check='say "hi"')
    finally:
        gateway.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(gateway.requests) == 2 and "retrying in 0s" in result.stdout
    assert json.loads(gateway.requests[1][2]) == {"check": 'say "hi"', "outcome": "success",
                                                  "run_url": "https://github.com/acme/api/actions/runs/1/attempts/1"}
    assert "counted=false" in outputs


def test_the_github_action_fails_on_a_refusal_and_never_prints_the_token(token_stub: Stub, tmp_path: Path) -> None:
    gateway = Stub([(403, {}, {"error": {"code": "binding_mismatch", "message": "ref: expected refs/heads/main"}})])
    try:
        result, _ = run_action(tmp_path, gateway.url, token_stub.url)
    finally:
        gateway.close()
    token = json.loads(json.dumps(token_stub.answers[0][2]))["value"]
    assert result.returncode == 1 and "binding_mismatch" in result.stdout
    assert result.stdout.count(token) == 1 and "::add-mask::" + token in result.stdout  # only the mask command


def test_the_github_action_refuses_a_bad_outcome_before_asking_for_a_token(token_stub: Stub, tmp_path: Path) -> None:
    result, _ = run_action(tmp_path, "http://127.0.0.1:9", token_stub.url, outcome="passed")
    assert result.returncode == 1 and "outcome must be" in result.stdout and token_stub.requests == []
