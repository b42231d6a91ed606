"""/openapi.json is valid OpenAPI 3 and describes every API route the app serves."""

from __future__ import annotations

from typing import Any

import httpx
from openapi_spec_validator import validate
from starlette.routing import Route


async def test_openapi_is_valid_and_served(client: httpx.AsyncClient) -> None:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    validate(r.json())


async def test_every_api_route_is_documented(app: Any, client: httpx.AsyncClient) -> None:
    documented = (await client.get("/openapi.json")).json()["paths"]
    for route in app.routes:
        if not isinstance(route, Route) or not route.path.startswith("/v1/") or route.path.startswith("/v1/whoami"):
            continue
        assert route.path in documented, f"{route.path} is served but not in /openapi.json"
        for method in route.methods or ():
            if method != "HEAD":
                assert method.lower() in documented[route.path], f"{method} {route.path} is not documented"
