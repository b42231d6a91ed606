"""A newcomer's first run, as they would do it: the shipped command in real
processes, the lines it prints pasted into bash, the README's blocks run as
written (on a free port instead of 8750, which may be taken on this machine)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from gateway.cli.client import score_text
from gateway.cli.quickstart import first_session
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
STATEMENT = "Migrations are named YYYYMMDD_description.sql."


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env.update(extra)
    return env


def relayroom(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=60
    )


def readme_block(heading: str) -> str:
    """The first ```bash block after `heading` in README.md."""
    text = (ROOT / "README.md").read_text()
    rest = text[text.index(heading) :]
    start = rest.index("```bash\n") + len("```bash\n")
    return rest[start : rest.index("```\n", start)]


def json_objects(text: str) -> list[dict[str, object]]:
    """Every JSON object in curl's output (its answers end without a newline)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        found.append(value)
        at = end
    return found


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


@pytest.mark.parametrize("command", ["serve", "quickstart"])
def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path, taken_port: int, command: str) -> None:
    started = time.monotonic()
    result = relayroom(command, "--port", str(taken_port), cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"relayroom: 127.0.0.1:{taken_port} is already in use (another relayroom serve or quickstart?): "
        "stop that one, or choose another port with --port"
    ]
    assert result.stdout == ""  # quickstart made no tokens it could not show
    assert not (tmp_path / "relayroom.db").exists(), "the port is checked before the store is opened"
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    "args, needle",
    [(["--port", "70000"], "a port is a number from 0 to 65535"), (["--host", "192.0.2.1"], "not an address of this machine")],
)
def test_an_address_that_cannot_be_listened_on_says_why(tmp_path: Path, args: list[str], needle: str) -> None:
    result = relayroom("serve", *args, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and needle in result.stderr


class Quickstart:
    def __init__(self, cwd: Path, port: int, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "quickstart", "--port", str(port)],
            cwd=cwd,
            env=clean_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def read_until(self, needle: str) -> list[str]:
        lines: list[str] = []
        assert self.proc.stdout is not None
        while not lines or needle not in lines[-1]:
            line = self.proc.stdout.readline()
            assert line, "quickstart stopped printing: " + "".join(lines)
            lines.append(line.rstrip("\n"))
        return lines

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def test_quickstart_prints_a_first_session_that_reaches_a_trusted_recall(tmp_path: Path) -> None:
    port = free_port()
    quick = Quickstart(tmp_path, port)
    try:
        printed = quick.read_until("1 trusted entry: the answer")
        walk = [line.strip() for line in printed[printed.index(next(l for l in printed if "Try it in a second terminal" in l)) + 1 :]]
        assert walk[0].startswith(f"export RELAYROOM_URL=http://127.0.0.1:{port} RELAYROOM_TOKEN=rr_")
        # pasted into a second shell, as the newcomer does; the first lines
        # may reach the port before the gateway answers (it is bound already)
        shell = subprocess.run(["bash", "-e"], input="\n".join(walk) + "\n", cwd=tmp_path, env=clean_env(),
                               capture_output=True, text=True, timeout=90)
        assert shell.returncode == 0, shell.stderr
        out = shell.stdout.splitlines()
        assert re.fullmatch(r"recall rc_\w+: 0 trusted entries", out[0]), out
        assert re.fullmatch(r"kn_\w+ is trusted: recall now answers with it", out[1]), out
        assert re.fullmatch(r"recall rc_\w+: 1 trusted entry", out[2]), out
        assert out[3] == f"1. [convention] {STATEMENT}"
    finally:
        quick.stop()

    # A second quickstart on the same store creates nothing and says how to get a token.
    again = Quickstart(tmp_path, free_port())
    try:
        printed = again.read_until("playbook:")
    finally:
        again.stop()
    text = "\n".join(printed)
    assert "already has projects" in printed[0] and "rr_" not in text
    assert "cannot be shown again" in text and "token create --project demo --level write" in text
    listed = relayroom("token", "list", "--project", "demo", "--database-url", "sqlite:///.relayroom/relayroom.db", cwd=tmp_path)
    assert listed.returncode == 0 and "demo-owner" in listed.stdout and "demo-agent" in listed.stdout


def test_the_readme_first_session_is_what_quickstart_prints() -> None:
    block = readme_block("`quickstart` creates project `demo`")
    lines = [line for line in block.splitlines() if line.strip()]
    printed = first_session("http://127.0.0.1:8750", "<agent token>", "<owner token>", ".venv/bin/relayroom")
    assert lines[0].startswith(printed[0])  # the export, with the tokens still to paste
    assert lines[1:] == printed[1:]


def test_the_readme_session_by_hand_runs_as_written(tmp_path: Path) -> None:
    port = str(free_port())
    (tmp_path / ".venv").symlink_to(sys.prefix)
    script = readme_block("## A first session, by hand").replace("8750", port)
    assert "relayroom serve &" in script and "kill %1" in script
    proc = subprocess.Popen(["bash", "-e"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path, env=clean_env(RELAYROOM_PORT=port), text=True, start_new_session=True)
    try:
        out, err = proc.communicate(script, timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        try:  # the backgrounded gateway, if the script stopped before `kill %1`
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err
    answers = json_objects(out)
    recalls = [a for a in answers if "recall_id" in a]
    assert [len(r["entries"]) for r in recalls] == [0, 1]
    assert recalls[1]["entries"][0]["statement"] == STATEMENT
    assert any(row["action"] == "override" for a in answers for row in a.get("rows", []))
    assert "olivia" in out and "agent-9" in out and "rr_" not in out  # token list showed no secret


def test_project_and_token_lists_never_show_a_secret(tmp_path: Path) -> None:
    env = clean_env(RELAYROOM_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}")
    assert relayroom("project", "list", cwd=tmp_path, env=env).stdout == ""
    relayroom("project", "create", "acme", "--k", "3", cwd=tmp_path, env=env)
    relayroom("project", "create", "globex", cwd=tmp_path, env=env)
    secrets = [
        relayroom("token", "create", "--project", "acme", "--level", level, "--name", name, cwd=tmp_path, env=env).stdout.split()[-1]
        for level, name in (("owner", "olivia"), ("read", "agent-9"))
    ]
    relayroom("token", "revoke", "--project", "acme", "--name", "agent-9", cwd=tmp_path, env=env)

    projects = relayroom("project", "list", cwd=tmp_path, env=env).stdout.splitlines()
    assert projects[0].split() == ["PROJECT", "K", "WINDOW", "CREATED", "ACTIVE", "TOKENS"]
    assert projects[1].split()[:4] == ["acme", "3", "30", "days"] and projects[1].split()[-1] == "1"
    assert projects[2].split()[0] == "globex" and projects[2].split()[-1] == "0"

    table = relayroom("token", "list", cwd=tmp_path, env=env).stdout
    rows = [line.split() for line in table.splitlines()]
    assert rows[0] == ["PROJECT", "PRINCIPAL", "LEVEL", "CREATED", "REVOKED"]
    assert [r[:3] for r in rows[1:]] == [["acme", "olivia", "owner"], ["acme", "agent-9", "read"]]
    assert rows[1][4] == "-" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[2][4])
    listed = json.loads(relayroom("token", "list", "--project", "acme", "--json", cwd=tmp_path, env=env).stdout)
    assert [t["revoked_at"] is None for t in listed] == [True, False]
    for output in (table, json.dumps(listed)):
        assert not any(secret in output for secret in secrets)
        assert "hash" not in output

    missing = relayroom("token", "list", "--project", "nope", cwd=tmp_path, env=env)
    assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1] == "relayroom: no project 'nope'"


@pytest.mark.parametrize(
    "score, text", [(5e-06, "5e-06"), (0.8421, "0.842"), (0.05, "0.05"), (1.0, "1"), (12.345, "12.3"), (None, "n/a")]
)
def test_scores_print_readably_at_any_scale(score: float | None, text: str) -> None:
    assert score_text(score) == text
