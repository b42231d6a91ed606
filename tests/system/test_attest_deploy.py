"""The CI-side scripts of gateway/ci_steps/ run as shipped, as a CI user meets them.

The GitHub composite action's step and the GitLab template's script are taken
out of their YAML files and run with bash, sh and busybox (the GitLab image is
Alpine), against the real test issuer (its `/mint/github` answers like
GitHub's token request URL) and a live gateway.  A `Front` server stands
where the network misbehaves: it holds requests (a hung gateway; a moment to
read curl's arguments from /proc), answers 503 with Retry-After, or passes
requests on to the live gateway.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from gateway.ci_steps import STEPS_BY_NAME
from tests.support.attest_fixtures import checkmap, github_binding, gitlab_binding, learn
from tests.support.attest_fixtures import gitlab_issuer, issuer  # noqa: F401 (fixtures)
from tests.conftest import live_setup, make_project
from tests.support.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None, reason="needs bash and curl")

REQUEST_TOKEN = "runner-request-token-5b1c"  # stands in for ACTIONS_ID_TOKEN_REQUEST_TOKEN
RUN_URL = "https://github.com/acme/api/actions/runs/1/attempts/1"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


Answer = tuple[int, dict[str, str], bytes]


class Front:
    """An HTTP server whose every request is answered by `respond(index, seen)`.
    With `hold`, each request waits (up to 30 s) until `release()`."""

    def __init__(self, respond: Callable[[int, Seen], Answer], *, hold: bool = False) -> None:
        self.respond = respond
        self.seen: list[Seen] = []
        self.arrived = threading.Semaphore(0)
        self.released = threading.Event()
        if not hold:
            self.released.set()
        front = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.path, dict(self.headers), self.rfile.read(length), time.time())
                front.seen.append(seen)
                index = len(front.seen) - 1
                front.arrived.release()
                if not front.released.wait(30):
                    return
                status, headers, raw = front.respond(index, seen)
                try:
                    self.send_response(status)
                    for name, value in {"Content-Type": "application/json", **headers,
                                        "Content-Length": str(len(raw))}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:
                    pass  # the client gave up (its timeout)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def wait_for_request(self, timeout: float = 20) -> None:
        assert self.arrived.acquire(timeout=timeout), "no request arrived"

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def json_answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
    return status, headers or {}, json.dumps(body).encode()


def forward_to(url: str) -> Callable[[int, Seen], Answer]:
    """Pass a request on to the live gateway and bring back its answer."""

    def respond(index: int, seen: Seen) -> Answer:
        headers = {k: v for k, v in seen.headers.items() if k.lower() in ("authorization", "content-type")}
        request = urllib.request.Request(url + seen.path, data=seen.body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=20) as answer:
                return answer.status, {}, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, {}, error.read()

    return respond


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def bearer(seen: Seen) -> str:
    return seen.headers["Authorization"].split(" ", 1)[1]


# -- running the scripts as shipped ------------------------------------------


def action_script() -> str:
    action = yaml.safe_load(STEPS_BY_NAME["github"].source.read_text())
    [step] = action["runs"]["steps"]
    assert step["shell"] == "bash"
    return str(step["run"])


def gitlab_template() -> dict[str, Any]:
    return dict(yaml.safe_load(STEPS_BY_NAME["gitlab"].source.read_text()))


def gitlab_script() -> str:
    return "\n".join(gitlab_template()[".relayroom-attest"]["script"])


def action_inputs() -> dict[str, str]:
    """The step's environment as GitHub fills it from the inputs' defaults."""
    action = yaml.safe_load(STEPS_BY_NAME["github"].source.read_text())
    defaults = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    env = action["runs"]["steps"][0]["env"]
    out = {}
    for variable, expression in env.items():
        name = expression.strip("${} ").removeprefix("inputs.")
        if name in defaults:
            out[variable] = defaults[name]
    return out


@dataclass
class Run:
    result: subprocess.CompletedProcess[str]
    outputs: dict[str, str]
    seconds: float

    @property
    def log(self) -> str:
        return self.result.stdout + self.result.stderr


def start_action(tmp_path: Path, gateway: str, token_url: str, **inputs: str) -> tuple[subprocess.Popen[str], Path]:
    output = tmp_path / "github_output"
    output.write_text("")
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output), "RUNNER_TEMP": str(tmp_path),
           "ACTIONS_ID_TOKEN_REQUEST_URL": token_url, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
           **action_inputs(), "RELAYROOM_URL": gateway, "RELAYROOM_CHECK": "migrations", "RELAYROOM_RUN_URL": RUN_URL}
    names = {"check": "RELAYROOM_CHECK", "outcome": "RELAYROOM_OUTCOME", "project": "RELAYROOM_PROJECT",
             "audience": "RELAYROOM_AUDIENCE", "attempts": "RELAYROOM_ATTEMPTS", "timeout": "RELAYROOM_TIMEOUT",
             "fail_on_refusal": "RELAYROOM_FAIL_ON_REFUSAL"}
    env.update({names[key]: value for key, value in inputs.items()})
    process = subprocess.Popen(["bash", "-c", action_script()], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    return process, output


def finish(process: subprocess.Popen[str], started: float, output: Path | None = None) -> Run:
    stdout, stderr = process.communicate(timeout=90)
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    outputs = {}
    if output is not None:
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return Run(result, outputs, time.monotonic() - started)


def run_action(tmp_path: Path, gateway: str, token_url: str, **inputs: str) -> Run:
    started = time.monotonic()
    process, output = start_action(tmp_path, gateway, token_url, **inputs)
    return finish(process, started, output)


def busybox_path(tmp_path: Path) -> str:
    """A PATH of busybox applets and curl only, as in the template's Alpine image."""
    folder = tmp_path / "busybox-bin"
    folder.mkdir(exist_ok=True)
    busybox = shutil.which("busybox")
    assert busybox is not None
    for applet in ("sh", "awk", "sed", "tr", "base64", "date", "mktemp", "head", "cat", "grep", "rm", "sleep", "printf"):
        (folder / applet).unlink(missing_ok=True)
        (folder / applet).symlink_to(busybox)
    curl = shutil.which("curl")
    assert curl is not None
    (folder / "curl").unlink(missing_ok=True)
    (folder / "curl").symlink_to(curl)
    return str(folder)


SHELLS = ["sh", pytest.param("busybox", marks=pytest.mark.skipif(shutil.which("busybox") is None, reason="no busybox"))]


def start_gitlab(tmp_path: Path, shell: str, gateway: str, token: str, **variables: str) -> subprocess.Popen[str]:
    template = gitlab_template()[".relayroom-attest"]
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), **{k: str(v) for k, v in template["variables"].items()},
           "RELAYROOM_URL": gateway, "RELAYROOM_CHECK": "migrations", "RELAYROOM_ID_TOKEN": token,
           "CI_JOB_URL": "https://gitlab.example.com/acme/api/-/jobs/302", **variables}
    if shell == "busybox":
        env["PATH"] = busybox_path(tmp_path)
    return subprocess.Popen(["sh", "-c", gitlab_script()], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, executable=shutil.which("sh", path=env["PATH"]), start_new_session=True)


def run_gitlab(tmp_path: Path, shell: str, gateway: str, token: str, **variables: str) -> Run:
    started = time.monotonic()
    return finish(start_gitlab(tmp_path, shell, gateway, token, **variables), started)


# -- a live gateway with a map binding both test issuers ----------------------


@dataclass
class Live:
    url: str
    entry: str
    github: OidcIssuer
    gitlab: OidcIssuer

    def token_url(self, **claims: str) -> str:
        query = "".join(f"&{name}={value}" for name, value in claims.items())
        return f"{self.github.url}/mint/github?api-version=2.0{query}"


@pytest.fixture
def live(live_server: Any, checkmap_dir: Path, issuer: OidcIssuer, gitlab_issuer: OidcIssuer) -> Live:  # noqa: F811
    async def setup(hub: Any) -> str:
        await make_project(hub, "acme")
        entry = await learn(hub, "acme", "Migrations run in staging first.")
        (checkmap_dir / "acme.yaml").write_text(checkmap(
            "acme", github_binding(issuer.url) + gitlab_binding(gitlab_issuer.url), {"migrations": [entry]}))
        await hub.checkmaps.refresh(hub.driver)
        return str(entry)

    return Live(live_server.url, live_setup(live_server, setup), issuer, gitlab_issuer)


@pytest.fixture
def backend() -> str:
    """These tests are about the CI side: one store behind the gateway is enough
    (the attestation path is tested on both stores in tests/http/)."""
    return "sqlite"


@pytest.fixture
def fronts() -> Iterator[list[Front]]:
    made: list[Front] = []
    yield made
    for front in made:
        front.close()


def test_the_github_action_attests_and_the_gitlab_template_promotes(live: Live, tmp_path: Path) -> None:
    run = run_action(tmp_path, live.url, live.token_url())
    assert run.result.returncode == 0, run.log
    assert run.outputs["counted"] == "true" and run.outputs["attestation-id"].startswith("at_")
    assert "::add-mask::" in run.result.stdout
    [mint] = live.github.mint_requests
    assert mint["Authorization"] == f"bearer {REQUEST_TOKEN}"

    gitlab = run_gitlab(tmp_path, "sh", live.url, live.gitlab.gitlab_token(time.time()))
    assert gitlab.result.returncode == 0, gitlab.log
    assert json.loads(gitlab.result.stdout.strip().splitlines()[-1])["promoted"] == [live.entry]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_gitlab_template_retries_a_503_with_its_one_token_and_is_counted(
    live: Live, tmp_path: Path, fronts: list[Front], shell: str
) -> None:
    forward = forward_to(live.url)
    front = Front(lambda i, seen: json_answer(503, {"error": {"code": "jwks_unavailable", "message": "retry"}},
                                              {"Retry-After": "1"}) if i == 0 else forward(i, seen))
    fronts.append(front)
    token = live.gitlab.gitlab_token(time.time())
    run = run_gitlab(tmp_path, shell, front.url, token)
    assert run.result.returncode == 0, run.log
    assert "retrying in 1s (attempt 1 of 6)" in run.result.stdout
    assert json.loads(run.result.stdout.strip().splitlines()[-1])["counted"] is True
    assert [bearer(seen) for seen in front.seen] == [token, token]


def test_after_a_retry_after_longer_than_the_tokens_life_the_action_sends_a_fresh_token(
    live: Live, tmp_path: Path, fronts: list[Front]
) -> None:
    forward = forward_to(live.url)
    front = Front(lambda i, seen: json_answer(503, {"error": {"code": "jwks_unavailable", "message": "retry"}},
                                              {"Retry-After": "4"}) if i == 0 else forward(i, seen))
    fronts.append(front)
    run = run_action(tmp_path, front.url, live.token_url(lifetime="2"))
    assert run.result.returncode == 0, run.log
    assert run.outputs["counted"] == "true"
    first, second = front.seen
    assert len(live.github.mint_requests) == 2
    assert bearer(first) != bearer(second)
    assert claims_of(bearer(first))["exp"] < second.at, "the first token had expired by the retry"
    assert claims_of(bearer(second))["exp"] >= second.at, "the retry carried a token still valid"


@pytest.mark.parametrize("shell", SHELLS)
def test_the_gitlab_template_never_waits_past_its_tokens_expiry(
    live: Live, tmp_path: Path, fronts: list[Front], shell: str
) -> None:
    front = Front(lambda i, seen: json_answer(503, {"error": {"code": "jwks_unavailable", "message": "retry"}},
                                              {"Retry-After": "30"}))
    fronts.append(front)
    now = time.time()
    run = run_gitlab(tmp_path, shell, front.url, live.gitlab.gitlab_token(now, exp=int(now) + 3))
    assert run.result.returncode == 1, run.log
    assert "expires before then; retry the job for a new token" in run.result.stdout
    assert len(front.seen) == 1 and run.seconds < 10

    expired = live.gitlab.gitlab_token(now, exp=int(now) - 1)
    run = run_gitlab(tmp_path, shell, front.url, expired)
    assert run.result.returncode == 1 and "expired before the gateway took it" in run.result.stdout
    assert len(front.seen) == 1, "an expired token is never sent"


def test_a_hung_gateway_meets_the_timeout_on_every_attempt(live: Live, tmp_path: Path, fronts: list[Front]) -> None:
    hung = Front(lambda i, seen: json_answer(201, {}), hold=True)
    fronts.append(hung)
    run = run_action(tmp_path, hung.url, live.token_url(), timeout="1", attempts="2")
    assert run.result.returncode == 1, run.log
    assert "HTTP 000; retrying in 5s (attempt 1 of 2)" in run.result.stdout
    assert "still unavailable after 2 attempts (HTTP 000)" in run.result.stdout
    assert "timed out" in run.result.stderr
    assert len(hung.seen) == 2 and len(live.github.mint_requests) == 2 and run.seconds < 15

    gitlab = run_gitlab(tmp_path, "sh", hung.url, live.gitlab.gitlab_token(time.time()),
                        RELAYROOM_TIMEOUT="1", RELAYROOM_ATTEMPTS="1")
    assert gitlab.result.returncode == 1 and "still unavailable after 1 attempts (HTTP 000)" in gitlab.result.stdout
    assert len(hung.seen) == 3 and gitlab.seconds < 6


@pytest.mark.parametrize("fail_on_refusal", ["true", "false"])
def test_a_refusal_fails_the_action_or_warns_as_the_input_says(live: Live, tmp_path: Path, fail_on_refusal: str) -> None:
    # A pull_request run never votes: the live gateway answers 403 event_not_allowed.
    run = run_action(tmp_path, live.url, live.token_url(event_name="pull_request"), fail_on_refusal=fail_on_refusal)
    assert "event_not_allowed" in run.result.stdout and run.outputs["refusal"] == "event_not_allowed"
    if fail_on_refusal == "true":
        assert run.result.returncode == 1 and "::error::the gateway refused the attestation (HTTP 403)" in run.log
    else:
        assert run.result.returncode == 0 and "::warning::the gateway refused the attestation (HTTP 403)" in run.log

    # Recorded without a vote: the map has no check of that name.
    (tmp_path / "github_output").write_text("")
    run = run_action(tmp_path, live.url, live.token_url(), check="not-in-the-map", fail_on_refusal=fail_on_refusal)
    assert run.outputs["counted"] == "false" and run.outputs["refusal"] == "unmapped_check"
    assert run.result.returncode == (1 if fail_on_refusal == "true" else 0), run.log

    # A failure is recorded as asked and never votes: not a refusal.
    run = run_action(tmp_path, live.url, live.token_url(), outcome="failure", fail_on_refusal=fail_on_refusal)
    assert run.result.returncode == 0 and "a failure never votes" in run.result.stdout, run.log


@pytest.mark.parametrize("fail_on_refusal", ["true", "false"])
def test_a_refusal_fails_the_gitlab_job_or_warns_as_the_variable_says(live: Live, tmp_path: Path, fail_on_refusal: str) -> None:
    token = live.gitlab.gitlab_token(time.time(), pipeline_source="merge_request_event")
    run = run_gitlab(tmp_path, "sh", live.url, token, RELAYROOM_FAIL_ON_REFUSAL=fail_on_refusal)
    assert "event_not_allowed" in run.result.stdout
    assert run.result.returncode == (1 if fail_on_refusal == "true" else 0), run.log
    assert ("WARNING (event_not_allowed)" in run.result.stdout) == (fail_on_refusal == "false")


def curl_arguments(port: str) -> list[list[str]]:
    """The argv of every curl process talking to 127.0.0.1:port, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"curl") and any(port.encode() in arg for arg in argv):
            found.append([arg.decode(errors="replace") for arg in argv if arg])
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_no_token_is_ever_in_curls_arguments(issuer: OidcIssuer, tmp_path: Path, fronts: list[Front]) -> None:  # noqa: F811
    token = issuer.github_token(time.time())
    token_endpoint = Front(lambda i, seen: json_answer(200, {"count": 1, "value": token}), hold=True)
    gateway = Front(lambda i, seen: json_answer(201, {"attestation_id": "at_1", "counted": True}), hold=True)
    fronts.extend([token_endpoint, gateway])
    started = time.monotonic()
    process, output = start_action(tmp_path, gateway.url, f"{token_endpoint.url}/token?api-version=2.0")
    seen_argv = []
    for front in (token_endpoint, gateway):
        front.wait_for_request()
        [argv] = curl_arguments(front.url.rsplit(":", 1)[1])
        seen_argv.append(argv)
        front.release()
    run = finish(process, started, output)
    assert run.result.returncode == 0 and run.outputs["counted"] == "true", run.log
    for argv in seen_argv:
        text = " ".join(argv)
        assert REQUEST_TOKEN not in text and token not in text
        assert "--connect-timeout" in argv and "--max-time" in argv
    assert token_endpoint.seen[0].headers["Authorization"] == f"bearer {REQUEST_TOKEN}"
    assert bearer(gateway.seen[0]) == token

    gitlab_token = issuer.gitlab_token(time.time())
    held = Front(lambda i, seen: json_answer(201, {"attestation_id": "at_2", "counted": True}), hold=True)
    fronts.append(held)
    started = time.monotonic()
    process = start_gitlab(tmp_path, "sh", held.url, gitlab_token)
    held.wait_for_request()
    [argv] = curl_arguments(held.url.rsplit(":", 1)[1])
    held.release()
    run = finish(process, started)
    assert run.result.returncode == 0, run.log
    assert gitlab_token not in " ".join(argv) and "--max-time" in argv
    assert bearer(held.seen[0]) == gitlab_token
    headers_left = list(tmp_path.glob("relayroom.*"))
    assert headers_left == [], "the header files are removed when the script ends"


@pytest.mark.parametrize("shell", ["bash", *SHELLS])
def test_a_cancelled_job_leaves_no_header_file(issuer: OidcIssuer, tmp_path: Path, fronts: list[Front], shell: str) -> None:  # noqa: F811
    # The runner cancels a job by signalling its process group.
    held = Front(lambda i, seen: json_answer(201, {"attestation_id": "at_1", "counted": True}), hold=True)
    fronts.append(held)
    if shell == "bash":
        process, _ = start_action(tmp_path, held.url, f"{issuer.url}/mint/github?api-version=2.0")
    else:
        process = start_gitlab(tmp_path, shell, held.url, issuer.gitlab_token(time.time()))
    held.wait_for_request()
    assert [p.name for p in tmp_path.glob("relayroom.*")], "the header files exist while curl runs"
    os.killpg(process.pid, signal.SIGTERM)
    process.communicate(timeout=20)
    assert process.returncode != 0 and list(tmp_path.glob("relayroom.*")) == []


@pytest.mark.parametrize("shell", ["bash", *SHELLS])
def test_the_body_is_json_whatever_the_inputs_hold_and_the_audience_is_url_encoded(
    issuer: OidcIssuer, tmp_path: Path, fronts: list[Front], shell: str  # noqa: F811
) -> None:
    check = 'say "hi" \\ back\tslash\x01\x1f é ✓\n'
    gateway = Front(lambda i, seen: json_answer(201, {"attestation_id": "at_1", "counted": True}))
    fronts.append(gateway)
    if shell == "bash":
        audience = "https://relay room.example/a?b=c&d"
        run = run_action(tmp_path, gateway.url, f"{issuer.url}/mint/github?api-version=2.0",
                         check=check, project="acme", audience=audience)
        assert run.result.returncode == 0, run.log
        assert json.loads(gateway.seen[0].body) == {"check": check, "outcome": "success", "run_url": RUN_URL,
                                                    "project": "acme"}
        assert claims_of(bearer(gateway.seen[0]))["aud"] == audience
    else:
        run = run_gitlab(tmp_path, shell, gateway.url, issuer.gitlab_token(time.time()), RELAYROOM_CHECK=check)
        assert run.result.returncode == 0, run.log
        assert json.loads(gateway.seen[0].body) == {"check": check, "outcome": "success",
                                                    "run_url": "https://gitlab.example.com/acme/api/-/jobs/302"}


def test_bad_inputs_stop_the_scripts_before_any_request(issuer: OidcIssuer, tmp_path: Path) -> None:  # noqa: F811
    token_url = f"{issuer.url}/mint/github?api-version=2.0"
    for inputs, message in [({"outcome": "passed"}, "outcome must be"), ({"attempts": "9"}, "attempts must be 1 to 6"),
                            ({"timeout": "soon"}, "timeout must be"), ({"fail_on_refusal": "yes"}, "fail-on-refusal must be")]:
        run = run_action(tmp_path, "http://127.0.0.1:9", token_url, **inputs)
        assert run.result.returncode == 1 and message in run.result.stdout, (inputs, run.log)
    assert issuer.mint_requests == []
    run = run_gitlab(tmp_path, "sh", "http://127.0.0.1:9", issuer.gitlab_token(time.time()), RELAYROOM_OUTCOME="passed")
    assert run.result.returncode == 1 and "RELAYROOM_OUTCOME must be" in run.result.stdout


def test_the_gitlab_template_keeps_merge_request_pipelines_out_and_pins_its_image() -> None:
    template = gitlab_template()
    job, failure = template[".relayroom-attest"], template[".relayroom-attest-failure"]
    assert "@sha256:" in job["image"]["name"] and len(job["image"]["name"].split("@sha256:")[1]) == 64
    assert job["id_tokens"]["RELAYROOM_ID_TOKEN"]["aud"] == "$RELAYROOM_AUDIENCE"
    assert job["variables"]["RELAYROOM_AUDIENCE"] == "relayroom"
    for rules, last in ((job["rules"], "on_success"), (failure["rules"], "on_failure")):
        never = [rule["if"] for rule in rules if rule.get("when") == "never"]
        assert any('"merge_request_event"' in text and '"external_pull_request_event"' in text for text in never)
        assert any("$CI_COMMIT_REF_PROTECTED" in text for text in never)
        assert rules[-1] == {"when": last}
    assert failure["extends"] == ".relayroom-attest" and failure["variables"] == {"RELAYROOM_OUTCOME": "failure"}


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="needs shellcheck")
def test_shellcheck_finds_nothing_in_either_script(tmp_path: Path) -> None:
    for name, text, dialect in (("action.sh", action_script(), "bash"), ("gitlab.sh", gitlab_script(), "sh")):
        (tmp_path / name).write_text(text)
        result = subprocess.run(["shellcheck", "-s", dialect, str(tmp_path / name)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout
