"""The OpenAPI 3 description of the HTTP API (placeholder; completed with the API)."""

from __future__ import annotations

from typing import Any


def spec() -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "RelayRoom Knowledge Gateway", "version": "0.1.0"}, "paths": {}}
