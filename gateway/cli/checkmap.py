"""`relayroom checkmap check [DIR]`: validate check maps before they ship.

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
from typing import Any

from gateway.ci.checkmaps.registry import CheckmapRegistry
from gateway.core.clock import SystemClock
from gateway.core.config import Config


def _store_url(args: argparse.Namespace, config: Config) -> str | None:
    if getattr(args, "database_url", None) or os.environ.get("RELAYROOM_DATABASE_URL"):
        return config.database_url
    if config.database_url.startswith("sqlite:///"):
        path = config.database_url[len("sqlite:///"):]
        return config.database_url if path and Path(path).is_file() else None
    return None


async def _check_store(registry: CheckmapRegistry, url: str) -> None:
    from gateway.store import open_driver

    driver = open_driver(url)
    await driver.open()
    try:
        await registry.check_store(driver)
    finally:
        await driver.close()


def cmd_check(args: argparse.Namespace) -> int:
    # Problems are printed below, once; the registry's log lines would repeat them.
    logging.getLogger("relayroom.checkmaps").setLevel(logging.CRITICAL)
    config = Config.from_env(database_url=getattr(args, "database_url", None))
    folder = Path(args.dir or config.checkmaps)
    if not folder.is_dir():
        print(f"relayroom: {folder} is not a folder of check maps", file=sys.stderr)
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


def register(sub: Any) -> None:
    checkmap = sub.add_parser("checkmap", help="check maps").add_subparsers(dest="action", required=True, metavar="ACTION")
    check = checkmap.add_parser("check", help="validate every check map; prints FILE:LINE: message per problem")
    check.add_argument("dir", nargs="?", default=None, help="folder of check maps (default: RELAYROOM_CHECKMAPS or ./checkmaps)")
    check.set_defaults(func=cmd_check)
