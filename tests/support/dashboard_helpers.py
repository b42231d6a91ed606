"""Driving the dashboard in-process: sign in, read a page's CSRF token, post forms."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

HTML = {"Accept": "text/html"}
_CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


def csrf_from(page: str) -> str:
    match = _CSRF.search(page)
    assert match is not None, "no CSRF field on the page"
    return html.unescape(match.group(1))


async def login(client: httpx.AsyncClient, token: str) -> httpx.Response:
    form = await client.get("/login", headers=HTML)
    assert form.status_code == 200
    return await client.post("/login", data={"token": token, "csrf_token": csrf_from(form.text)}, headers=HTML)


async def csrf_for(client: httpx.AsyncClient, path: str = "/projects/acme/knowledge") -> str:
    page = await client.get(path, headers=HTML)
    assert page.status_code == 200, page.text
    return csrf_from(page.text)


async def post_form(client: httpx.AsyncClient, path: str, data: dict[str, Any] | None = None, *, csrf: bool = True) -> httpx.Response:
    fields = dict(data or {})
    if csrf:
        fields["csrf_token"] = await csrf_for(client)
    return await client.post(path, data=fields, headers=HTML)
