"""`relayroom quickstart` as a newcomer meets it: run inside a git checkout it
changes nothing `git status` shows, and each agent configuration it prints
works as pasted (the SDK's HTTP client with the `.mcp.json` block, the SDK's
stdio client with the stdio block, the `claude mcp add` line's URL and header)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from gateway.ci.checkmaps.registry import CheckmapRegistry
from gateway.cli.quickstart import DEMO_CHECKMAP, SCHEMA, place_example_map
from gateway.core.clock import SystemClock
from tests.conftest import free_port
from tests.system.test_cli_first_run import Quickstart, clean_env

ROOT = Path(__file__).resolve().parents[2]


def git(checkout: Path, *args: str) -> str:
    identity = ["-c", "user.name=newcomer", "-c", "user.email=newcomer@example.com"]
    done = subprocess.run(["git", *identity, *args], cwd=checkout, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def checkout_like_this_repository(tmp_path: Path) -> Path:
    """A git checkout that tracks a `checkmaps/` folder, as this repository does."""
    checkout = tmp_path / "checkout"
    (checkout / "checkmaps").mkdir(parents=True)
    (checkout / "checkmaps" / "README.md").write_text("Check maps of this project.\n")
    (checkout / "README.md").write_text("A project of a user's.\n")
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "a user's project")
    return checkout


def printed_block(lines: list[str], title: str) -> str:
    """The lines indented under `title` in quickstart's output, dedented."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title)) + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = []
    for line in lines[start:]:
        if len(line) - len(line.lstrip()) < indent:
            break
        block.append(line[indent:])
    return "\n".join(block)


def test_quickstart_inside_a_checkout_leaves_git_status_empty(tmp_path: Path) -> None:
    checkout = checkout_like_this_repository(tmp_path)
    quick = Quickstart(checkout, free_port())
    try:
        printed = quick.read_until("playbook:")
    finally:
        quick.stop()
    assert "created project demo" in printed[0]
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    # What it made is there, in its own folder that ignores itself.
    home = checkout / ".relayroom"
    assert (home / "relayroom.db").is_file() and (home / "checkmaps" / "demo.yaml").is_file()
    assert (home / ".gitignore").read_text().splitlines()[-1] == "*"
    # The checkout's own check map folder is as it was: nothing is loaded from it.
    registry = CheckmapRegistry(checkout / "checkmaps", SystemClock())
    registry.reload()
    assert registry.snapshot.maps == {}

    # Run again, it serves the store it made, and names it in the lines to paste.
    again = Quickstart(checkout, free_port())
    try:
        printed = again.read_until("playbook:")
    finally:
        again.stop()
    assert "already has projects" in printed[0]
    listing = next(line.strip() for line in printed if "token list" in line)
    assert "--database-url sqlite:///.relayroom/relayroom.db token list" in listing
    listed = subprocess.run(["bash", "-c", listing], cwd=checkout, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "demo-agent" in listed.stdout, listed.stderr
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""


async def test_each_agent_configuration_quickstart_prints_works_as_pasted(tmp_path: Path) -> None:
    port = free_port()
    quick = Quickstart(tmp_path, port)
    try:
        printed = quick.read_until("Try it in a second terminal")
        base = f"http://127.0.0.1:{port}"

        # The .mcp.json block, parsed as a client parses the file, then used by the SDK client.
        http_server = json.loads(printed_block(printed, ".mcp.json"))["mcpServers"]["relayroom"]
        assert http_server["type"] == "http" and http_server["url"] == f"{base}/mcp"
        assert http_server["headers"]["Authorization"].startswith("Bearer rr_")
        http = httpx2.AsyncClient(headers=http_server["headers"], timeout=20)
        async with http, Client(streamable_http_client(http_server["url"], http_client=http)) as client:
            learned = await client.call_tool("learn", {"kind": "fact", "statement": "Pasted configurations work."})
        assert learned.structured_content is not None and learned.structured_content["state"] == "candidate"

        # The stdio block: its command is absolute, so the client may start it from any folder.
        stdio_server = json.loads(printed_block(printed, "a client that only starts a command"))["mcpServers"]["relayroom"]
        assert os.path.isabs(stdio_server["command"]) and stdio_server["args"][-1] == "mcp"
        assert stdio_server["env"]["RELAYROOM_URL"] == base
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        params = StdioServerParameters(command=stdio_server["command"], args=stdio_server["args"], cwd=elsewhere,
                                       env={**clean_env(), **stdio_server["env"]})
        async with Client(params) as client:
            recalled = await client.call_tool("recall", {"query": "pasted configurations"})
        assert not recalled.is_error and recalled.structured_content is not None

        # The claude line: Claude Code's own syntax, and the URL and header it holds are accepted.
        argv = shlex.split(printed_block(printed, "Claude Code, one command"))
        assert argv[:6] == ["claude", "mcp", "add", "--transport", "http", "relayroom"]
        url, flag, header = argv[6:]
        name, _, value = header.partition(": ")
        assert flag == "--header" and url == f"{base}/mcp" and name == "Authorization"
        ping = httpx.post(url, headers={name: value, "Accept": "application/json, text/event-stream"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=20)
        assert ping.status_code == 200 and ping.json()["result"] == {}
        assert value == http_server["headers"]["Authorization"] == f"Bearer {stdio_server['env']['RELAYROOM_TOKEN']}"
    finally:
        quick.stop()


def test_a_check_map_folder_the_person_names_gets_the_example_map(tmp_path: Path) -> None:
    maps, work = tmp_path / "maps", tmp_path / "work"
    work.mkdir()
    port = free_port()
    quick = Quickstart(work, port, RELAYROOM_CHECKMAPS=str(maps))
    try:
        printed = quick.read_until("playbook:")
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=20).json()
    finally:
        quick.stop()
    assert any(line.split() == ["check", "map:", f"{maps / 'demo.yaml'},", "the", "example"] for line in printed), printed
    assert (maps / "demo.yaml").read_text() == DEMO_CHECKMAP and (maps / SCHEMA.name).is_file()
    loaded = [row for row in ready["checkmaps"] if row["file"].endswith("demo.yaml")]
    assert [(Path(row["file"]).resolve(), row["error"]) for row in loaded] == [((maps / "demo.yaml").resolve(), None)]


def test_a_named_folder_in_a_checkouts_tracked_tree_gets_nothing(tmp_path: Path) -> None:
    checkout = checkout_like_this_repository(tmp_path)
    quick = Quickstart(checkout, free_port(), RELAYROOM_CHECKMAPS="checkmaps")
    try:
        printed = quick.read_until("playbook:")
    finally:
        quick.stop()
    said = next(line for line in printed if "check map:" in line)
    assert "nothing written: checkmaps is in the git checkout" in said and "git does not ignore demo.yaml" in said, said
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    assert sorted(p.name for p in (checkout / "checkmaps").iterdir()) == ["README.md"]

    # A folder the checkout ignores takes it (a fresh store: quickstart places a map only with a new project).
    (checkout / ".gitignore").write_text("local-maps/\n")
    git(checkout, "add", ".gitignore")
    git(checkout, "commit", "-q", "-m", "ignore local maps")
    quick = Quickstart(checkout, free_port(), RELAYROOM_CHECKMAPS="local-maps",
                       RELAYROOM_DATABASE_URL="sqlite:///.relayroom/second.db")
    try:
        printed = quick.read_until("playbook:")
    finally:
        quick.stop()
    assert any(line.split() == ["check", "map:", "local-maps/demo.yaml,", "the", "example"] for line in printed), printed
    assert (checkout / "local-maps" / "demo.yaml").read_text() == DEMO_CHECKMAP
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""


def test_the_example_map_never_replaces_a_file(tmp_path: Path) -> None:
    mine = "project: demo\nissuers: []\nchecks: {}\n# mine\n"
    (tmp_path / "demo.yaml").write_text(mine)
    said = place_example_map(tmp_path, own=False)
    assert said == f"{tmp_path / 'demo.yaml'} was already there: kept as it was"
    assert (tmp_path / "demo.yaml").read_text() == mine and (tmp_path / SCHEMA.name).is_file()
