"""Subcommands owned by other areas: each module adds its own parser."""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.cli.main import Subcommands

MODULES = (
    "gateway.cli.quickstart",
    "gateway.cli.checkmap",
    "gateway.cli.client",
    "gateway.cli.transfer",
    "gateway.cli.mcp_stdio",
    "gateway.cli.ci_init",
)


def register(sub: Subcommands, store: argparse.ArgumentParser) -> None:
    """`store` is the parent parser holding `--database-url`, for commands that open the store."""
    for name in MODULES:
        importlib.import_module(name).register(sub, store)
