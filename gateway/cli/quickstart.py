"""`relayroom quickstart`: a running gateway with a demo project in one command."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli.checkout import checkout_of, unignored
from gateway.core.config import Config

if TYPE_CHECKING:
    from gateway.cli.main import Subcommands

SCHEMA = Path(__file__).resolve().parents[1] / "ci" / "checkmaps" / "checkmap.schema.json"

DEMO_CHECKMAP = """\
# demo.yaml: which CI checks speak for which entries of project demo.
# quickstart wrote it as an example; a real project's map is kept in
# its repository and reviewed like code (docs/ci-attestations.md).
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


HOME = Path(".relayroom")
HOME_IGNORE = "# Written by relayroom quickstart: its demo store and check maps, never committed.\n*\n"


def places(database_url: str | None) -> tuple[str, Path, bool]:
    """Where quickstart keeps its store and reads its check maps, and whether
    that folder is its own.  Unless the person names them, both live in
    `.relayroom/`, a folder that ignores itself: inside any git checkout
    quickstart then changes nothing `git status` shows."""
    url = database_url or os.environ.get("RELAYROOM_DATABASE_URL") or f"sqlite:///{HOME / 'relayroom.db'}"
    named = os.environ.get("RELAYROOM_CHECKMAPS")
    return url, Path(named) if named else HOME / "checkmaps", not named


def make_home() -> None:
    HOME.mkdir(exist_ok=True)
    ignore = HOME / ".gitignore"
    if not ignore.exists():
        ignore.write_text(HOME_IGNORE)


def place_example_map(maps: Path, own: bool) -> str:
    """Write the example map (`demo.yaml`, and the schema beside it, where its
    `$schema` line points an editor) into `maps`, never over a file already
    there, and say where it went or why nothing was written.  Quickstart's
    own folder ignores itself; a folder the person named takes the files only
    outside a git checkout or where the checkout ignores them, so that
    `git status` shows nothing new."""
    demo_map = maps / "demo.yaml"
    new = [path for path in (demo_map, maps / SCHEMA.name) if not path.exists()]
    folder = maps.resolve()
    if not own and new and (top := checkout_of(folder)) is not None:
        shown = unignored(top, [folder / path.name for path in new])
        if shown is None or shown:
            why = "git could not say whether it ignores" if shown is None else "git does not ignore"
            return (f"nothing written: {maps} is in the git checkout {top} and {why} {', '.join(p.name for p in shown or new)} "
                    "there (name a folder git ignores, or leave RELAYROOM_CHECKMAPS unset for quickstart's own)")
    maps.mkdir(parents=True, exist_ok=True)
    for path in new:
        path.write_bytes(DEMO_CHECKMAP.encode() if path == demo_map else SCHEMA.read_bytes())
    ignored = f" (git ignores {HOME}/)" if own else ""
    return f"{demo_map}{' was already there: kept as it was' if demo_map not in new else ', the example'}{ignored}"


def set_up(database_url: str | None) -> tuple[Config, str, dict[str, str] | None, str | None]:
    """Everything quickstart does before it serves: the store, the demo
    project and its tokens, the example check map.  Returns the config to
    serve, the project to show, its new tokens (None: the store already had
    projects) and where the example map went (None: the store had projects,
    so none was placed)."""
    url, maps, own_maps = places(database_url)
    if url.startswith(f"sqlite:///{HOME}/") or own_maps:
        make_home()
    config = Config.from_env(database_url=url, checkmaps=str(maps))
    slug, tokens = asyncio.run(_prepare(config))
    example = place_example_map(maps, own_maps) if tokens is not None else None
    return config, slug, tokens, example


def _admin(cli: str, config: Config) -> str:
    """`relayroom` as the lines below need it: with the store quickstart chose."""
    if os.environ.get("RELAYROOM_DATABASE_URL") == config.database_url:
        return cli
    return f"{cli} --database-url {config.database_url}"


def cmd_quickstart(args: argparse.Namespace) -> int:
    from gateway.cli.agent_config import blocks
    from gateway.cli.listen import ListenError, listen
    from gateway.cli.main import CommandError, cmd_serve

    defaults = Config.from_env()
    host = args.host or defaults.host
    port = defaults.port if args.port is None else args.port
    # The port first: a taken port must not cost the only showing of new tokens.
    try:
        sock = listen(host, port)
    except ListenError as exc:
        raise CommandError(str(exc)) from None
    try:
        config, slug, tokens, example = set_up(args.database_url)
    except BaseException:
        sock.close()
        raise
    base = f"http://{host}:{sock.getsockname()[1]}"
    cli = program()
    admin = _admin(cli, config)
    if tokens is None:
        print(f"the store ({config.database_url}) already has projects: serving it as it is.")
        print("Tokens are stored only as hashes, so the ones shown before cannot be shown again. To get one:")
        print(f"  {admin} token list                 # who holds which token")
        print(f"  {admin} token create --project {slug} --level owner --name {slug}-owner-2")
        print(f"  {admin} token create --project {slug} --level write --name {slug}-agent-2")
        print(f"(to start over on an empty store: {cli} quickstart --database-url sqlite:///{HOME}/fresh.db)")
    else:
        print("created project demo and two tokens (shown once; only their hashes are stored):")
        print(f"  owner token  (dashboard, confirm/refute): {tokens['owner']}")
        print(f"  agent token  (learn, recall over REST/MCP): {tokens['agent']}")
        ignored = f" (git ignores {HOME}/)" if config.database_url.startswith(f"sqlite:///{HOME}/") else ""
        print(f"  store:          {config.database_url}{ignored}")
        print(f"  check map:      {example}")
    print(f"  dashboard:      {base}/login (sign in with the owner token)")
    print(f"  API reference:  {base}/docs")
    print(f"  MCP:            {base}/mcp")
    print(f"  playbook:       {base}/projects/{slug}/RELAYROOM.md")
    if tokens is not None:
        print("Connect an agent: paste one of these (each holds the agent token; keep it out of git).")
        for title, text in blocks(base, tokens["agent"]):
            print(f"  {title}")
            for line in text.splitlines():
                print(f"    {line}")
        print("The gateway runs in this terminal until Ctrl-C. Try it in a second terminal, in this folder:")
        for line in first_session(base, tokens["agent"], tokens["owner"], cli):
            print(f"  {line}")
    sys.stdout.flush()
    serve_args = argparse.Namespace(host=host, port=port, workers=None, database_url=config.database_url)
    os.environ["RELAYROOM_CHECKMAPS"] = config.checkmaps  # the workers read the environment
    return cmd_serve(serve_args, sock)


def register(sub: Subcommands, store: argparse.ArgumentParser) -> None:
    from gateway.cli.main import _setting

    about = "on an empty store: create project demo, tokens and a check map, print how to connect an agent, then serve"
    quick = sub.add_parser(
        "quickstart", help=about, description=about + ".",
        epilog=f"Unless RELAYROOM_DATABASE_URL, --database-url or RELAYROOM_CHECKMAPS say otherwise, the store and the "
               f"example check map live in {HOME}/, a folder that git ignores by itself: inside a checkout, "
               "`git status` shows nothing new. A folder RELAYROOM_CHECKMAPS names gets the example demo.yaml "
               "(never over a file already there) unless it lies in a git checkout that does not ignore it.",
    )
    quick.add_argument("--database-url", dest="database_url", default=argparse.SUPPRESS, metavar="URL",
                       help=f"the store (default: $RELAYROOM_DATABASE_URL, else sqlite:///{HOME}/relayroom.db)")
    quick.add_argument("--host", default=None, help=_setting("host"))
    quick.add_argument("--port", type=int, default=None, help=_setting("port"))
    quick.set_defaults(func=cmd_quickstart)
