"""`relayroom quickstart`: a running gateway with a demo project in one command."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
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


async def _prepare(config: Config) -> tuple[str, dict[str, str] | None]:
    """The project to show, and its new tokens (None when the store already
    had projects: quickstart then creates nothing)."""
    from gateway.hub import Hub

    hub = Hub(config)
    await hub.start(background=False)
    try:
        slugs = [project.slug for project in await hub.accounts.projects()]
        if slugs:
            return ("demo" if "demo" in slugs else slugs[0]), None
        await hub.accounts.create_project("demo")
        return "demo", {
            "owner": await hub.accounts.create_token("demo", "owner", "demo-owner"),
            "agent": await hub.accounts.create_token("demo", "write", "demo-agent"),
        }
    finally:
        await hub.stop()


def program() -> str:
    """This command as the person's shell reaches it, for lines they will
    paste: `relayroom` when that is the one on PATH, else the path typed."""
    argv0 = sys.argv[0]
    if os.path.basename(argv0) != "relayroom":  # python -m gateway
        return f"{_as_typed(sys.executable)} -m gateway"
    found = shutil.which("relayroom")
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return "relayroom"
    return _as_typed(argv0)


def _as_typed(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def first_session(base: str, agent: str, owner: str, cli: str) -> list[str]:
    """The walk from a candidate to a recall answered by a trusted entry, as
    shell lines (README.md shows the same lines after the export)."""
    return [
        f"export RELAYROOM_URL={base} RELAYROOM_TOKEN={agent} OWNER_TOKEN={owner}",
        f'ID=$({cli} learn -q convention "Migrations are named YYYYMMDD_description.sql.")   # an agent learns: a candidate',
        f'{cli} recall "how do I name a migration?"        # 0 trusted entries: no one confirmed it yet',
        f"RELAYROOM_TOKEN=$OWNER_TOKEN {cli} confirm $ID    # the owner confirms: trusted",
        f'{cli} recall "how do I name a migration?"        # 1 trusted entry: the answer',
    ]


def cmd_quickstart(args: argparse.Namespace) -> int:
    from gateway.cli.listen import ListenError, listen
    from gateway.cli.main import CommandError, cmd_serve

    if args.database_url:
        os.environ["RELAYROOM_DATABASE_URL"] = args.database_url
    config = Config.from_env()
    host = args.host or config.host
    port = config.port if args.port is None else args.port
    # The port first: a taken port must not cost the only showing of new tokens.
    try:
        sock = listen(host, port)
    except ListenError as exc:
        raise CommandError(str(exc)) from None
    try:
        slug, tokens = asyncio.run(_prepare(config))
    except BaseException:
        sock.close()
        raise
    base = f"http://{host}:{sock.getsockname()[1]}"
    cli = program()
    if tokens is None:
        print(f"the store ({config.database_url}) already has projects: serving it as it is.")
        print("Tokens are stored only as hashes, so the ones shown before cannot be shown again. To get one:")
        print(f"  {cli} token list                 # who holds which token")
        print(f"  {cli} token create --project {slug} --level owner --name {slug}-owner-2")
        print(f"  {cli} token create --project {slug} --level write --name {slug}-agent-2")
        print(f"(to start over on an empty store: RELAYROOM_DATABASE_URL=sqlite:///./fresh.db {cli} quickstart)")
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
    print(f"  dashboard:      {base}/login (sign in with the owner token)")
    print(f"  API reference:  {base}/docs")
    print(f"  MCP:            {base}/mcp")
    print(f"  playbook:       {base}/projects/{slug}/RELAYROOM.md")
    if tokens is not None:
        print("The gateway runs in this terminal until Ctrl-C. Try it in a second terminal, in this folder:")
        for line in first_session(base, tokens["agent"], tokens["owner"], cli):
            print(f"  {line}")
    serve_args = argparse.Namespace(host=host, port=port, workers=None, database_url=args.database_url)
    return cmd_serve(serve_args, sock)


def register(sub: Any) -> None:
    quick = sub.add_parser("quickstart", help="on an empty store: create project demo, tokens and a check map, then serve")
    quick.add_argument("--host", default=None)
    quick.add_argument("--port", type=int, default=None)
    quick.set_defaults(func=cmd_quickstart)
