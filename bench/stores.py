"""Which store a benchmark runs on: SQLite by default, PostgreSQL on request.

    .venv/bin/python bench/attest.py                                           # SQLite file in a temp folder
    RELAYROOM_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/attest.py                                       # PostgreSQL

With a `postgresql://` URL the benchmark never touches the database it
names: it creates a database of its own on that server (`relayroom_bench_*`,
so the role needs CREATEDB), runs there, and drops it at the end, also on
failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse, urlunparse

ENV = "RELAYROOM_DATABASE_URL"


def backend() -> str:
    url = os.environ.get(ENV, "")
    return "postgres" if url.startswith(("postgresql://", "postgres://")) else "sqlite"


async def _admin(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _database_name(label: str) -> str:
    clean = "".join(c if c.isalnum() else "_" for c in label.lower())
    return f"relayroom_bench_{clean}_{uuid.uuid4().hex[:8]}"


async def create_database(label: str) -> str | None:
    """A new database on the PostgreSQL server; None when the bench runs on SQLite."""
    if backend() == "sqlite":
        return None
    server = os.environ[ENV]
    name = _database_name(label)
    await _admin(server, f'CREATE DATABASE "{name}"')
    return urlunparse(urlparse(server)._replace(path=f"/{name}"))


async def drop_database(url: str) -> None:
    name = urlparse(url).path.lstrip("/")
    assert name.startswith("relayroom_bench_"), "only a database this module created is dropped"
    await _admin(os.environ[ENV], f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def bench_database(folder: Path, label: str = "bench") -> Iterator[str]:
    """A fresh, empty store for one benchmark run; its URL (call outside an event loop)."""
    url = asyncio.run(create_database(label))
    if url is None:
        yield f"sqlite:///{folder / f'{label}.db'}"
        return
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(drop_database(url))
