"""Subcommands owned by other areas: each module adds its own parser."""

from __future__ import annotations

import importlib
from typing import Any

MODULES = (
    "gateway.cli_quickstart",
    "gateway.cli_checkmap",
    "gateway.cli_client",
    "gateway.cli_transfer",
)


def register(sub: Any) -> None:
    for name in MODULES:
        importlib.import_module(name).register(sub)
