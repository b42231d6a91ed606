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
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
