"""`relayroom checkmap check [DIR or FILE]`: validate check maps before they ship.

A folder is checked as the gateway reads its check map folder (every map,
and the conflicts between them); one file as the gateway reads a map a
repository publishes (`gateway.ci.publish.read_map`; the conflicts with
other projects' maps only the gateway holding them judges), so a map's pull
request can fail its own CI before it merges.
Prints one `FILE:LINE: message` per problem on stdout and exits 1, or a
short OK line and exits 0.  Notes (`FILE:LINE: note: ...`, the events a
binding's allow_events lets vote) are printed too and do not fail the check.  When a store is at hand (`--database-url`,
RELAYROOM_DATABASE_URL, or an existing default SQLite file) it also
reports maps naming a project the store lacks and supported ids that are
not entries of the map's project.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.ci.checkmaps.model import CheckMap, Problem
from gateway.ci.checkmaps.registry import CheckmapRegistry, store_warnings
from gateway.ci.checkmaps.validate import allow_event_notes
from gateway.ci.publish import read_map
from gateway.cli.main import CommandError, command_group
from gateway.core.clock import SystemClock
from gateway.core.config import Config

if TYPE_CHECKING:
    from gateway.cli.main import Subcommands


def _store_url(args: argparse.Namespace, config: Config) -> str | None:
    """The store to check ids against: the one named, or the default SQLite
    file when it exists.  A check never creates a store: a named SQLite file
    that is missing is an error (a typo would otherwise check against an
    empty new store, and leave the file behind)."""
    named = bool(getattr(args, "database_url", None) or os.environ.get("RELAYROOM_DATABASE_URL"))
    if not config.database_url.startswith("sqlite:///"):
        return config.database_url if named else None
    path = config.database_url[len("sqlite:///"):] or "relayroom.db"
    if Path(path).is_file():
        return config.database_url
    if named:
        raise CommandError(f"no SQLite store at {path}: a check reads a store, it never creates one (check the URL, "
                           "or leave RELAYROOM_DATABASE_URL and --database-url unset to check the maps alone)")
    return None


async def _check_store(registry: CheckmapRegistry, url: str) -> None:
    from gateway.store import open_driver

    driver = open_driver(url)
    await driver.open()
    try:
        # The maps the repositories published, which the folder's files may not displace, and the store's word on ids.
        await registry.refresh_published(driver)
        await registry.check_store(driver)
    finally:
        await driver.close()


async def _file_warnings(checkmap: CheckMap, url: str) -> list[Problem]:
    from gateway.store import open_driver

    driver = open_driver(url)
    await driver.open()
    try:
        return await driver.read(lambda q: store_warnings(q, checkmap))
    finally:
        await driver.close()


def _check_file(path: Path, url: str | None) -> int:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    checkmap, problems = read_map(raw, str(path))
    if checkmap is not None and url is not None:
        problems = asyncio.run(_file_warnings(checkmap, url))
    for problem in problems:
        print(problem)
    for note in allow_event_notes(checkmap) if checkmap is not None else ():
        print(note)
    if problems:
        print(f"relayroom: {len(problems)} problem(s) in {path}", file=sys.stderr)
        return 1
    checked = "checked against the store" if url else "no store to check entry ids against"
    print(f"OK: {path} is a valid check map for project {checkmap.project if checkmap else '?'} ({checked})")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    # Problems are printed below, once; the registry's log lines would repeat them.
    logging.getLogger("relayroom.checkmaps").setLevel(logging.CRITICAL)
    config = Config.from_env(database_url=getattr(args, "database_url", None))
    folder = Path(args.dir or config.checkmaps)
    if folder.is_file():
        return _check_file(folder, _store_url(args, config))
    if not folder.is_dir():
        print(f"relayroom: {folder} is not a folder of check maps, nor a check map file", file=sys.stderr)
        return 1
    registry = CheckmapRegistry(folder, SystemClock())
    registry.reload()
    files = registry.files()
    url = _store_url(args, config)
    if url is not None:
        asyncio.run(_check_store(registry, url))
    problems = registry.problems()
    for problem in problems:
        print(problem)
    for note in registry.notes():  # what a map lifts on purpose: printed, not counted
        print(note)
    if problems:
        print(f"relayroom: {len(problems)} problem(s) in the check maps of {folder}", file=sys.stderr)
        return 1
    checked = "checked against the store" if url else "no store to check entry ids against"
    print(f"OK: {len(files)} check map(s) in {folder} are valid ({checked})")
    return 0


def register(sub: Subcommands, store: argparse.ArgumentParser) -> None:
    checkmap = command_group(sub, "checkmap", "check maps: check")
    check = checkmap.add_parser("check", parents=[store], help="validate every check map; prints FILE:LINE: message per problem")
    check.add_argument("dir", nargs="?", default=None, metavar="DIR or FILE",
                       help="folder of check maps (default: RELAYROOM_CHECKMAPS or ./checkmaps), or one map file as "
                            "its repository publishes it")
    check.set_defaults(func=cmd_check)
