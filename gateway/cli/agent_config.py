"""What a person pastes to connect an agent: the client configurations
`quickstart` prints, each holding the token so that it works as pasted.

    claude mcp add ...    Claude Code's command line (HTTP, the token as a header)
    .mcp.json             the project file Claude Code, Cursor and others read
    stdio                 for clients that only start a command: `relayroom mcp`
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

SERVER_NAME = "relayroom"


def http_config(mcp_url: str, token: str) -> dict[str, Any]:
    return {"mcpServers": {SERVER_NAME: {"type": "http", "url": mcp_url, "headers": {"Authorization": f"Bearer {token}"}}}}


def stdio_config(base_url: str, token: str) -> dict[str, Any]:
    command, *args = relayroom_command()
    return {"mcpServers": {SERVER_NAME: {
        "command": command,
        "args": [*args, "mcp"],
        "env": {"RELAYROOM_URL": base_url, "RELAYROOM_TOKEN": token},
    }}}


def claude_line(mcp_url: str, token: str) -> str:
    # A token is rr_ and URL-safe base64, a URL has no quote: both sit safely in double quotes.
    return f'claude mcp add --transport http {SERVER_NAME} {mcp_url} --header "Authorization: Bearer {token}"'


def relayroom_command() -> list[str]:
    """This program as an absolute command, for a client that starts it from
    any folder: the `relayroom` script beside this Python (a venv's bin), the
    one that was run, the one on PATH, else `python -m gateway`."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "relayroom")
    ran = os.path.abspath(sys.argv[0]) if os.path.basename(sys.argv[0]) == "relayroom" else None
    on_path = shutil.which("relayroom")
    for candidate in (beside, ran, on_path):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return [os.path.abspath(candidate)]
    return [os.path.abspath(sys.executable), "-m", "gateway"]


def as_json(config: dict[str, Any]) -> str:
    """A configuration as a person reads it: one server, one line."""
    servers = config["mcpServers"]
    inner = ",\n".join(f"    {json.dumps(name)}: {json.dumps(server)}" for name, server in servers.items())
    return '{\n  "mcpServers": {\n' + inner + "\n  }\n}"


def blocks(base_url: str, token: str) -> list[tuple[str, str]]:
    """(title, text) of each way to connect, in the order printed."""
    mcp_url = f"{base_url}/mcp"
    return [
        ("Claude Code, one command:", claude_line(mcp_url, token)),
        (".mcp.json (Claude Code, Cursor and other clients that speak HTTP):", as_json(http_config(mcp_url, token))),
        ("a client that only starts a command (stdio):", as_json(stdio_config(base_url, token))),
    ]
