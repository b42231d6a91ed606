"""`relayroom quickstart`: a running gateway with a demo project in one command."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from gateway.core.config import Config

SCHEMA = Path(__file__).resolve().parents[1] / "ci" / "checkmaps" / "checkmap.schema.json"

DEMO_CHECKMAP = """\
# checkmaps/demo.yaml: which CI checks speak for which entries of project demo.
# Reviewed like code.  See docs/ci-attestations.md for every field.
# yaml-language-server: $schema=checkmap.schema.json
project: demo
issuers:
  # A CI system that signs Standard Webhooks with a shared secret.  The
  # secret itself lives in the environment (DEMO_CI_SECRET), never here.
  - provider: webhook
    source: demo-ci
    secret_env: DEMO_CI_SECRET
checks: {}
  # Map a check to the entries it proves, e.g.:
  # migrations-test:
  #   supports: [kn_...]
"""


async def _prepare(config: Config) -> dict[str, str] | None:
    from gateway.hub import Hub

    hub = Hub(config)
    await hub.start(background=False)
    try:
        if await hub.accounts.projects():
            return None
        await hub.accounts.create_project("demo")
        return {
            "owner": await hub.accounts.create_token("demo", "owner", "demo-owner"),
            "agent": await hub.accounts.create_token("demo", "write", "demo-agent"),
        }
    finally:
        await hub.stop()


def cmd_quickstart(args: argparse.Namespace) -> int:
    from gateway.cli.main import cmd_serve

    if args.database_url:
        os.environ["RELAYROOM_DATABASE_URL"] = args.database_url
    config = Config.from_env()
    tokens = asyncio.run(_prepare(config))
    host = args.host or config.host
    port = args.port or config.port
    base = f"http://{host}:{port}"
    if tokens is None:
        print(f"the store ({config.database_url}) already has projects: serving it as it is")
    else:
        maps = Path(config.checkmaps)
        maps.mkdir(parents=True, exist_ok=True)
        demo_map = maps / "demo.yaml"
        if not demo_map.exists():
            demo_map.write_text(DEMO_CHECKMAP)
        schema = maps / SCHEMA.name
        if not schema.exists():  # beside the map, where its $schema line points an editor
            schema.write_bytes(SCHEMA.read_bytes())
        print("created project demo and two tokens (shown once; only their hashes are stored):")
        print(f"  owner token  (dashboard, confirm/refute): {tokens['owner']}")
        print(f"  agent token  (learn, recall over REST/MCP): {tokens['agent']}")
        print(f"  example check map: {demo_map}")
        print(f"  dashboard:   {base}/login")
        print(f"  REST API:    {base}/v1/projects/demo/entries")
        print(f"  MCP:         {base}/mcp")
        print(f"  playbook:    {base}/projects/demo/RELAYROOM.md")
        print("try it:")
        print(f"  curl -s -X POST {base}/v1/projects/demo/entries -H 'Authorization: Bearer {tokens['agent']}' \\")
        print("       -H 'Content-Type: application/json' -d '{\"kind\": \"convention\", \"statement\": \"Tests live beside the file.\"}'")
    serve_args = argparse.Namespace(host=args.host, port=args.port, workers=None, database_url=args.database_url)
    return cmd_serve(serve_args)


def register(sub: Any) -> None:
    quick = sub.add_parser("quickstart", help="on an empty store: create project demo, tokens and a check map, then serve")
    quick.add_argument("--host", default=None)
    quick.add_argument("--port", type=int, default=None)
    quick.set_defaults(func=cmd_quickstart)
