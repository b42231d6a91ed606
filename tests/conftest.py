"""Shared fixtures: a hub on a real database (SQLite file, or PostgreSQL when
one is provided), the app in-process over httpx's ASGI transport, a real
uvicorn server on 127.0.0.1, and a helper to make projects and tokens.

Every test that takes `hub` runs once per backend: `sqlite` always, and
`postgres` when RELAYROOM_TEST_POSTGRES_URL names a server (`.ci/run` starts
one; CI sets RELAYROOM_REQUIRE_POSTGRES=1 so a missing server fails instead of
skipping).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import httpx
import pytest

from gateway.core.clock import ManualClock
from gateway.core.config import Config
from gateway.hub import Hub

BACKENDS = ["sqlite", "postgres"]
# Most tests rank lexically: loading the model is for the recall tests
# (tests/unit/recall/conftest.py) and those that check the default install.
# Servers started as processes read it from the environment.
os.environ.setdefault("RELAYROOM_SEMANTIC_MODEL", "off")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") == "postgres":
            item.add_marker(pytest.mark.postgres)


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "postgres: runs against the PostgreSQL backend")
    config.addinivalue_line("markers", "slow: a bounded load, crash or browser test")


@pytest.fixture(params=BACKENDS)
def backend(request: Any) -> str:
    return request.param


@pytest.fixture
def database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'relayroom.db'}"
        return
    from tests.support.pg import fresh_database

    with fresh_database() as url:
        yield url


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=time.time())


@pytest.fixture
def checkmap_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "checkmaps"
    folder.mkdir()
    return folder


@pytest.fixture
def config(database_url: str, checkmap_dir: Path) -> Config:
    return Config.from_env(
        {},
        database_url=database_url,
        checkmaps=str(checkmap_dir),
        allow_insecure_issuers=True,
        sweep_interval=0.0,
        semantic_model="off",
    )


@pytest.fixture
async def hub(config: Config, clock: ManualClock) -> AsyncIterator[Hub]:
    hub = Hub(config, clock=clock)
    await hub.start(background=False)
    try:
        yield hub
    finally:
        await hub.stop()


@pytest.fixture
async def app(hub: Hub) -> AsyncIterator[Any]:
    from gateway.web.app import build_app

    application = build_app(hub, manage_hub=False)
    # The MCP session manager's task group must be entered and left by one
    # task; pytest-asyncio may run setup and teardown in different ones.
    started, stop = asyncio.Event(), asyncio.Event()

    async def keep_running() -> None:
        async with application.state.session_manager.run():
            started.set()
            await stop.wait()

    task = asyncio.create_task(keep_running())
    await started.wait()
    try:
        yield application
    finally:
        stop.set()
        await task


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8750") as c:
        yield c


@dataclass
class ProjectTokens:
    slug: str
    owner: str
    writer: str
    reader: str
    other_writer: str

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


async def make_project(hub: Hub, slug: str = "acme", **settings: Any) -> ProjectTokens:
    await hub.accounts.create_project(slug, k=settings.get("k"), window_days=settings.get("window_days"))
    return ProjectTokens(
        slug=slug,
        owner=await hub.accounts.create_token(slug, "owner", "olivia"),
        writer=await hub.accounts.create_token(slug, "write", "agent-7"),
        reader=await hub.accounts.create_token(slug, "read", "reader-1"),
        other_writer=await hub.accounts.create_token(slug, "write", "agent-9"),
    )


@pytest.fixture
async def acme(hub: Hub) -> ProjectTokens:
    return await make_project(hub, "acme")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """The real app under uvicorn on 127.0.0.1, in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def live_config(database_url: str, checkmap_dir: Path) -> Config:
    return Config.from_env(
        {}, database_url=database_url, checkmaps=str(checkmap_dir), allow_insecure_issuers=True, sweep_interval=0.0
    )


@pytest.fixture
def live_server(live_config: Config) -> Iterator[LiveServer]:
    """A gateway on its own event loop and thread, with the real clock.

    Set up projects through `live_setup(server, coro_fn)`, which runs on the
    server's loop (the store belongs to that loop)."""
    from gateway.web.app import build_app

    hub = Hub(live_config)
    with LiveServer(build_app(hub)) as server:
        server.hub = hub  # type: ignore[attr-defined]
        yield server


def live_setup(server: LiveServer, make: Any) -> Any:
    """Run `await make(hub)` on the live server's event loop and return its result."""
    loop = _server_loop(server)
    return asyncio.run_coroutine_threadsafe(make(server.hub), loop).result(30)  # type: ignore[attr-defined]


def _server_loop(server: LiveServer) -> asyncio.AbstractEventLoop:
    loop = server.hub.loop  # type: ignore[attr-defined]
    if loop is None:
        raise RuntimeError("the live server's hub has not started")
    return loop
