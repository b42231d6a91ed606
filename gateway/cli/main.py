"""`relayroom`: serve the gateway and administer projects, tokens and check maps.

Every command exits 0 on success and non-zero otherwise, with the reason as
the last line of stderr (never a traceback).  Machine-readable output goes to
stdout.  Subcommands are registered by small modules (`cli_*.py`) so each
area keeps its own commands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Awaitable, Callable

from gateway import __version__
from gateway.core.config import Config
from gateway.core.errors import GatewayError

if TYPE_CHECKING:
    from gateway.hub import Hub

    # What `add_subparsers` returns: each command module adds its commands to it.
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


class CommandError(Exception):
    """A failure to report as one line on stderr."""


def open_hub(args: argparse.Namespace) -> Hub:
    from gateway.hub import Hub

    # One-shot commands never recall: no model to load.
    return Hub(Config.from_env(database_url=getattr(args, "database_url", None), semantic_model="off"))


def run_with_hub(work: Callable[[Hub, argparse.Namespace], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    """Run `work(hub, args)` with an open store and no background tasks."""

    def command(args: argparse.Namespace) -> int:
        async def main() -> int:
            hub = open_hub(args)
            await hub.start(background=False)
            try:
                return await work(hub, args)
            finally:
                await hub.stop()

        return asyncio.run(main())

    return command


async def _check_store(url: str) -> None:
    from gateway.store import open_driver

    driver = open_driver(url)
    await driver.open()
    await driver.close()


def cmd_serve(args: argparse.Namespace, sock: socket.socket | None = None) -> int:
    """Serve on `sock` (quickstart binds it before preparing the store) or on
    a socket bound here, before anything else starts."""
    import uvicorn

    from gateway.cli.listen import ListenError, listen, raise_descriptor_limit
    from gateway.core.allocator import cap_arenas
    from gateway.core.connections import ACCEPT_BATCH

    cap_arenas()  # before the store check's threads make arenas of their own

    # Flags override the environment; workers read the environment.
    for flag, env in (("host", "RELAYROOM_HOST"), ("port", "RELAYROOM_PORT"), ("database_url", "RELAYROOM_DATABASE_URL")):
        value = getattr(args, flag, None)
        if value is not None:
            os.environ[env] = str(value)
    config = Config.from_env(workers=args.workers)
    if sock is None:
        try:
            sock = listen(config.host, config.port)
        except ListenError as exc:
            raise CommandError(str(exc)) from None
    # Open (and migrate) the store once before serving: a store that cannot
    # be reached is one clear line on stderr, not a traceback per worker.
    asyncio.run(_check_store(config.database_url))
    from gateway.core.logs import configure_logging

    sys.stdout.flush()
    configure_logging(config.log_level, config.log_format)
    server_config = uvicorn.Config(
        "gateway.web.app:app_from_env",
        factory=True,
        host=config.host,
        port=config.port,
        workers=config.workers if config.workers > 1 else None,
        log_config=None,
        access_log=False,
        # Python's own loop, not uvloop (which uvicorn[standard] installs and
        # "auto" would pick): under load uvloop took new connections in late,
        # and its speed-up on a real request is within the noise
        # (docs/decisions/0006).
        loop="asyncio",
        proxy_headers=True,
        h11_max_incomplete_event_size=128 * 1024,
        # httptools bounds neither the size of a request head nor the time to
        # send it; the wrapping protocol in gateway/web/http_limits.py does.
        http=_http_protocol(),
        # Connections accepted in one pass of the loop, before the protocol
        # counts them: small enough that accept never runs out of descriptors
        # (gateway/core/connections.py).
        backlog=ACCEPT_BATCH,
        timeout_graceful_shutdown=5,
    )
    host, port = sock.getsockname()[:2]
    log = logging.getLogger("relayroom.serve")
    log.info("listening on http://%s:%d (Ctrl-C stops)", f"[{host}]" if ":" in host else host, port)
    log.info("each process may open %d files (connections included)", raise_descriptor_limit())
    # What uvicorn.run does with a socket bound beforehand.
    server = uvicorn.Server(server_config)
    try:
        if server_config.workers > 1:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(server_config, sockets=[sock]).run()
            return 0
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    except SystemExit:  # uvicorn's startup failure; the reason was logged
        pass
    if not server.started:
        raise CommandError("the gateway did not start; the reason is in the log lines above")
    return 0


def _http_protocol() -> str:
    try:
        import httptools  # noqa: F401
    except ImportError:  # pure-Python h11: its head bound is h11_max_incomplete_event_size
        return "h11"
    return "gateway.web.http_limits:BoundedHttpToolsProtocol"


async def _project_create(hub: Hub, args: argparse.Namespace) -> int:
    project = await hub.accounts.create_project(args.slug, k=args.k, window_days=args.window_days)
    print(f"created project {project.slug} (K={project.settings.k_distinct_issuers}, window {project.settings.window_days:g} days)")
    return 0


def _moment(value: float | None) -> str:
    """A time for a terminal: to the second, UTC ("-" for never)."""
    from gateway.core.clock import to_rfc3339

    return "-" if value is None else (to_rfc3339(float(int(value))) or "-")


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns aligned for people, one row a line for `grep` and `awk`."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


async def _project_list(hub: Hub, args: argparse.Namespace) -> int:
    projects = await hub.accounts.projects()
    listed = []
    for project in projects:
        tokens = await hub.accounts.tokens(project.slug)
        listed.append((project, sum(1 for t in tokens if t["revoked_at"] is None)))
    if args.json:
        print(json.dumps([
            {"slug": p.slug, "k_distinct_issuers": p.settings.k_distinct_issuers, "window_days": p.settings.window_days,
             "created_at": _moment(p.created_at), "active_tokens": active}
            for p, active in listed
        ], indent=2))
        return 0
    if not listed:
        print("no projects yet: relayroom project create SLUG (or relayroom quickstart)", file=sys.stderr)
        return 0
    print_table(
        ["PROJECT", "K", "WINDOW", "CREATED", "ACTIVE TOKENS"],
        [[p.slug, str(p.settings.k_distinct_issuers), f"{p.settings.window_days:g} days", _moment(p.created_at), str(active)]
         for p, active in listed],
    )
    return 0


async def _token_list(hub: Hub, args: argparse.Namespace) -> int:
    slugs = [args.project] if args.project else [p.slug for p in await hub.accounts.projects()]
    tokens = [token for slug in slugs for token in await hub.accounts.tokens(slug)]
    if args.json:
        print(json.dumps([
            {**t, "created_at": _moment(t["created_at"]), "revoked_at": None if t["revoked_at"] is None else _moment(t["revoked_at"])}
            for t in tokens
        ], indent=2))
        return 0
    if not tokens:
        where = f"project {args.project}" if args.project else "any project"
        print(f"no tokens in {where} yet: relayroom token create --project SLUG --level LEVEL --name NAME", file=sys.stderr)
        return 0
    print_table(
        ["PROJECT", "PRINCIPAL", "LEVEL", "CREATED", "REVOKED"],
        [[t["project"], t["principal"], t["level"], _moment(t["created_at"]), _moment(t["revoked_at"])] for t in tokens],
    )
    return 0


async def _token_create(hub: Hub, args: argparse.Namespace) -> int:
    secret = await hub.accounts.create_token(args.project, args.level, args.name)
    print(f"# {args.level} token for {args.name} in project {args.project}; shown once, only its hash is stored")
    print(secret)
    return 0


async def _token_revoke(hub: Hub, args: argparse.Namespace) -> int:
    count = await hub.accounts.revoke_tokens(args.project, args.name)
    if count == 0:
        raise CommandError(f"{args.name} has no active token in project {args.project}")
    print(f"revoked {count} token(s) of {args.name} in project {args.project}")
    return 0


async def _sweep(hub: Hub, args: argparse.Namespace) -> int:
    retired = await hub.sweep()
    print(retired)
    return 0


START_HERE = (
    "Start with `relayroom quickstart`: it creates a demo project and its tokens, prints how to connect an agent, "
    "and serves the gateway on 127.0.0.1:8750."
)


def _setting(name: str) -> str:
    """A flag's default as the settings table states it: its variable, else its value."""
    from gateway.core.config import SETTINGS

    setting = next(s for s in SETTINGS if s.name == name)
    return f"{setting.help} (default: ${setting.env}, else {setting.default})"


def store_options() -> argparse.ArgumentParser:
    """`--database-url`, taken after a command as well as before it.  SUPPRESS
    keeps a subcommand that was not given the flag from overwriting the value
    given before the command."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--database-url", dest="database_url", default=argparse.SUPPRESS, metavar="URL",
                         help=_setting("database_url"))
    return options


def command_group(sub: Subcommands, name: str, help: str) -> Subcommands:
    """A command of several actions (`token create`, `token list`, ...):
    given alone, it prints its actions instead of an argparse error."""
    parser = sub.add_parser(name, help=help, description=help)
    parser.set_defaults(func=lambda args: _print_help(parser))
    return parser.add_subparsers(dest="action", metavar="ACTION", title="actions")


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relayroom",
        description="RelayRoom Knowledge Gateway: a typed, provenance-tracked table of project facts behind a trust gate.",
        epilog=START_HERE + " `relayroom COMMAND -h` says more about each command.",
    )
    parser.add_argument("--version", action="version", version=f"relayroom {__version__}")
    parser.add_argument("--database-url", dest="database_url", default=None, metavar="URL", help=_setting("database_url"))
    parser.set_defaults(func=lambda args: _print_help(parser))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    store = store_options()

    serve = sub.add_parser("serve", parents=[store], help="run the gateway (HTTP API, webhooks, MCP, dashboard, playbook)")
    serve.add_argument("--host", default=None, help=_setting("host"))
    serve.add_argument("--port", type=int, default=None, help=_setting("port"))
    serve.add_argument("--workers", type=int, default=None, help=_setting("workers"))
    serve.set_defaults(func=cmd_serve)

    project = command_group(sub, "project", "projects: create, list")
    create = project.add_parser("create", parents=[store], help="create a project")
    create.add_argument("slug", help="the project's name in URLs: a-z, 0-9 and -, up to 63 characters")
    create.add_argument("--k", type=int, default=None, help="distinct CI issuers needed to promote (default 2)")
    create.add_argument("--window-days", type=float, default=None, help="contradiction window in days (default 30)")
    create.set_defaults(func=run_with_hub(_project_create))
    plist = project.add_parser("list", parents=[store], help="list the projects: K, window, when created, active tokens")
    plist.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    plist.set_defaults(func=run_with_hub(_project_list))

    token = command_group(sub, "token", "project tokens: create, list, revoke")
    tcreate = token.add_parser("create", parents=[store], help="create a token; prints the secret as the last line")
    tcreate.add_argument("--project", required=True, metavar="SLUG")
    tcreate.add_argument("--level", required=True, choices=["read", "write", "owner"],
                         help="read: recall; write: also learn and report errors; owner: also confirm, refute, the dashboard")
    tcreate.add_argument("--name", required=True, metavar="PRINCIPAL", help="who holds it, as the audit ledger names them")
    tcreate.set_defaults(func=run_with_hub(_token_create))
    trevoke = token.add_parser("revoke", parents=[store], help="revoke every token of a principal")
    trevoke.add_argument("--project", required=True, metavar="SLUG")
    trevoke.add_argument("--name", required=True, metavar="PRINCIPAL")
    trevoke.set_defaults(func=run_with_hub(_token_revoke))
    tlist = token.add_parser("list", parents=[store], help="list tokens: principal, level, created, revoked (never a secret)")
    tlist.add_argument("--project", default=None, metavar="SLUG", help="one project (default: every project)")
    tlist.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    tlist.set_defaults(func=run_with_hub(_token_list))

    sweep = sub.add_parser("sweep", parents=[store], help="retire every expired entry now; prints how many")
    sweep.set_defaults(func=run_with_hub(_sweep))

    from gateway.cli import extra as cli_extra

    cli_extra.register(sub, store)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage and the reason
        return int(exc.code or 0)
    try:
        return int(args.func(args) or 0)
    except (GatewayError, CommandError, ValueError, OSError) as exc:
        message = exc.message if isinstance(exc, GatewayError) else str(exc)
        print(f"relayroom: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("relayroom: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a traceback on the console
        print(f"relayroom: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
