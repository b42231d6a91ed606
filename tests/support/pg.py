"""A throwaway PostgreSQL database per test, on the server named by
RELAYROOM_TEST_POSTGRES_URL (`.ci/run` starts one from the installed binaries)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from typing import Any, AsyncIterator, Iterator
from urllib.parse import urlparse, urlunparse

import pytest

ENV = "RELAYROOM_TEST_POSTGRES_URL"


def server_url() -> str:
    url = os.environ.get(ENV)
    if not url:
        if os.environ.get("RELAYROOM_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{ENV} is not set but RELAYROOM_REQUIRE_POSTGRES=1: CI must run the PostgreSQL tests")
        pytest.skip(f"no PostgreSQL server: set {ENV}=postgresql://USER@HOST:PORT/postgres (.ci/run does)")
    return url


def _run(coro: Any) -> Any:
    """Run admin statements on a private loop (the test's loop may be running)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


async def _admin(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def with_database(url: str, name: str) -> str:
    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"/{name}"))


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    base = server_url()
    name = f"rr_test_{uuid.uuid4().hex[:12]}"
    _run(_admin(base, f'CREATE DATABASE "{name}"'))
    try:
        yield with_database(base, name)
    finally:
        with contextlib.suppress(Exception):
            _run(_admin(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextlib.asynccontextmanager
async def open_postgres(options: str = "") -> AsyncIterator[Any]:
    """A `PostgresDriver` opened on a fresh database (`options`: the URL's
    query string, e.g. "?pool_max=2"), closed and dropped afterwards."""
    from gateway.store.postgres import PostgresDriver

    with fresh_database() as url:
        driver = PostgresDriver(url + options)
        await driver.open()
        try:
            yield driver
        finally:
            await driver.close()
