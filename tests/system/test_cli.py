"""The `relayroom` command line, run as a user would: real processes, a real
SQLite file, the server talked to over HTTP."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import free_port
from tests.support.helpers import stop, wait_healthy


def relayroom(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", *args], env=env, capture_output=True, text=True, timeout=60
    )
    if check and result.returncode != 0:
        raise AssertionError(f"relayroom {' '.join(args)} failed: {result.stderr}")
    return result


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env["RELAYROOM_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"
    env["RELAYROOM_CHECKMAPS"] = str(tmp_path / "checkmaps")
    return env


@pytest.fixture
def served(cli_env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, time.monotonic() + 20)
        yield url
    finally:
        stop(proc)


def test_newcomer_flow_through_cli_and_http(cli_env: dict[str, str], served: str) -> None:
    out = relayroom("project", "create", "acme", "--k", "2", env=cli_env)
    assert "acme" in out.stdout
    owner = relayroom("token", "create", "--project", "acme", "--level", "owner", "--name", "olivia", env=cli_env).stdout.strip().splitlines()[-1]
    agent = relayroom("token", "create", "--project", "acme", "--level", "write", "--name", "agent-7", env=cli_env).stdout.strip().splitlines()[-1]
    other = relayroom("token", "create", "--project", "acme", "--level", "read", "--name", "agent-9", env=cli_env).stdout.strip().splitlines()[-1]
    assert owner.startswith("rr_") and agent.startswith("rr_") and owner != agent

    with httpx.Client(base_url=served, timeout=10) as http:
        r = http.post(
            "/v1/projects/acme/entries",
            json={"kind": "convention", "statement": "Migrations are named YYYYMMDD_description.sql."},
            headers={"Authorization": f"Bearer {agent}"},
        )
        assert r.status_code == 201 and r.json()["state"] == "candidate"
        entry_id = r.json()["id"]
        assert http.get("/v1/projects/acme/recall", params={"q": "migration naming"}, headers={"Authorization": f"Bearer {other}"}).json()["entries"] == []
        c = http.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers={"Authorization": f"Bearer {owner}"})
        assert c.status_code == 200 and c.json()["state"] == "trusted"
        found = http.get("/v1/projects/acme/recall", params={"q": "how are migrations named"}, headers={"Authorization": f"Bearer {other}"})
        assert [e["id"] for e in found.json()["entries"]] == [entry_id]

        relayroom("token", "revoke", "--project", "acme", "--name", "agent-9", env=cli_env)
        assert http.get("/v1/projects/acme/entries", headers={"Authorization": f"Bearer {other}"}).status_code == 401


def test_token_is_stored_hashed(cli_env: dict[str, str], tmp_path: Path) -> None:
    relayroom("project", "create", "acme", env=cli_env)
    secret = relayroom("token", "create", "--project", "acme", "--level", "write", "--name", "a", env=cli_env).stdout.strip().splitlines()[-1]
    raw = (tmp_path / "cli.db").read_bytes()
    wal = tmp_path / "cli.db-wal"
    if wal.exists():
        raw += wal.read_bytes()
    assert secret.encode() not in raw


@pytest.mark.parametrize(
    "args,needle",
    [
        (["project", "create", "Bad_Slug"], "slug"),
        (["project", "create", "acme", "--k", "0"], "k_distinct_issuers"),
        (["project", "create", "acme", "--window-days", "0"], "window_days"),
        (["token", "create", "--project", "nope", "--level", "read", "--name", "x"], "no project"),
        (["token", "revoke", "--project", "acme", "--name", "ghost"], "no active token"),
    ],
)
def test_cli_errors_are_one_line_on_stderr(cli_env: dict[str, str], args: list[str], needle: str) -> None:
    if args[:2] == ["token", "revoke"]:
        relayroom("project", "create", "acme", env=cli_env)
    result = relayroom(*args, env=cli_env, check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert needle in last and "Traceback" not in result.stderr


def test_a_slug_or_a_principal_name_with_a_trailing_line_break_is_refused(cli_env: dict[str, str]) -> None:
    """`acme2\n` would be a second project that prints like `acme2`: a slug
    and a principal name match whole, with no trailing line break."""
    relayroom("project", "create", "acme2", env=cli_env)
    for args, needle in (
        (["project", "create", "acme2\n"], "slug"),
        (["project", "create", "beta\n"], "slug"),
        (["token", "create", "--project", "acme2", "--level", "owner", "--name", "olivia\n"], "principal name"),
    ):
        result = relayroom(*args, env=cli_env, check=False)
        assert result.returncode == 1, args
        assert needle in result.stderr.strip().splitlines()[-1] and "line break" in result.stderr
    listed = json.loads(relayroom("project", "list", "--json", env=cli_env).stdout)
    assert [p["slug"] for p in listed] == ["acme2"]


def test_project_create_twice_fails(cli_env: dict[str, str]) -> None:
    relayroom("project", "create", "acme", env=cli_env)
    result = relayroom("project", "create", "acme", env=cli_env, check=False)
    assert result.returncode == 1 and "already exists" in result.stderr.strip().splitlines()[-1]


def test_sweep_prints_count(cli_env: dict[str, str]) -> None:
    relayroom("project", "create", "acme", env=cli_env)
    assert relayroom("sweep", env=cli_env).stdout.strip().splitlines()[-1] == "0"


def test_defaults_are_the_contracts_and_the_settings_table_agrees() -> None:
    from dataclasses import fields

    from gateway.core.config import SETTINGS, Config

    config = Config.from_env({})
    assert (config.database_url, config.checkmaps, config.audience) == ("sqlite:///./relayroom.db", "./checkmaps", "relayroom")
    assert (config.host, config.port, config.allow_insecure_issuers) == ("127.0.0.1", 8750, False)
    assert config.github_webhook_secret is None and config.secret_key is None
    # The table (env, docs) and the dataclass (code) hold each default once each: they must agree.
    assert {s.name for s in SETTINGS} == {f.name for f in fields(Config)} - {"extra"}
    for setting in SETTINGS:
        assert getattr(Config(), setting.name) == setting.default, setting.name


def test_bad_database_url(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "RELAYROOM_DATABASE_URL": "mysql://x"}
    result = relayroom("sweep", env=env, check=False)
    assert result.returncode == 1 and "unsupported database URL" in result.stderr.strip().splitlines()[-1]


def test_quickstart_creates_demo_and_serves(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "quickstart", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        while not any("playbook:" in line for line in lines):
            line = proc.stdout.readline()
            assert line, "quickstart exited early: " + "".join(lines)
            lines.append(line)
        owner = next(line.split()[-1] for line in lines if "owner token" in line)
        agent = next(line.split()[-1] for line in lines if "agent token" in line)
        home = tmp_path / ".relayroom"  # quickstart's own folder, which git ignores
        assert (home / "relayroom.db").exists() and (home / "checkmaps" / "demo.yaml").exists()
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, time.monotonic() + 20)
        r = httpx.post(f"{url}/v1/projects/demo/entries", json={"kind": "fact", "statement": "Quickstart works."},
                       headers={"Authorization": f"Bearer {agent}"})
        assert r.status_code == 201
        c = httpx.post(f"{url}/v1/projects/demo/entries/{r.json()['id']}/confirm", headers={"Authorization": f"Bearer {owner}"})
        assert c.json()["state"] == "trusted"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    # a second quickstart on the same store creates nothing new
    again = subprocess.Popen([sys.executable, "-m", "gateway", "quickstart", "--port", str(free_port())], env=env, cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert again.stdout is not None
        assert "already has projects" in again.stdout.readline()
    finally:
        again.terminate()
        again.wait(10)


def test_version_is_printed_and_exits_0() -> None:
    import subprocess
    import sys

    from gateway import __version__

    result = subprocess.run([sys.executable, "-m", "gateway", "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"relayroom {__version__}"


def test_a_bare_relayroom_says_where_to_start_and_lists_the_commands(cli_env: dict[str, str]) -> None:
    bare = relayroom(env=cli_env)
    assert bare.returncode == 0 and bare.stderr == ""
    assert "Start with `relayroom quickstart`" in bare.stdout
    for command in ("serve", "quickstart", "project", "token", "checkmap", "recall", "learn", "mcp"):
        assert f"\n    {command} " in bare.stdout, command
    group = relayroom("token", env=cli_env)  # a command of several actions, given alone
    assert group.returncode == 0 and all(f"\n    {a} " in group.stdout for a in ("create", "list", "revoke"))


@pytest.mark.parametrize("command", ["serve", "quickstart", "mcp"])
def test_help_gives_every_flag_a_description_and_its_default(command: str) -> None:
    from gateway.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    flags = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    assert flags
    for flag in flags:
        assert flag.help and "default" in flag.help, f"{command} {flag.option_strings[0]} says no default"


def test_database_url_works_before_or_after_the_command(tmp_path: Path, cli_env: dict[str, str]) -> None:
    env = {k: v for k, v in cli_env.items() if k != "RELAYROOM_DATABASE_URL"}
    url = f"sqlite:///{tmp_path / 'flag.db'}"
    relayroom("project", "create", "acme", "--database-url", url, env=env)
    before = relayroom("--database-url", url, "project", "list", env=env)
    after = relayroom("token", "list", "--database-url", url, env=env, check=False)
    assert "acme" in before.stdout and after.returncode == 0 and "no tokens in any project" in after.stderr


def test_checkmap_check_never_creates_a_missing_store(tmp_path: Path, cli_env: dict[str, str]) -> None:
    missing = tmp_path / "typo.db"
    (tmp_path / "maps").mkdir()
    result = relayroom("checkmap", "check", str(tmp_path / "maps"), "--database-url", f"sqlite:///{missing}",
                       env=cli_env, check=False)
    assert result.returncode == 1 and not missing.exists()
    assert result.stderr.strip().splitlines()[-1].startswith(f"relayroom: no SQLite store at {missing}")
