"""Storage: one interface (`Driver` + `Queries`), two backends."""

from __future__ import annotations

from urllib.parse import urlparse

from gateway.store.base import Driver


def open_driver(url: str) -> Driver:
    """Pick the backend from the database URL, without opening it yet."""
    if url.startswith("sqlite:///"):
        from gateway.store.sqlite import SqliteDriver

        return SqliteDriver(url[len("sqlite:///") :] or "relayroom.db")
    if url.startswith(("postgresql://", "postgres://")):
        from gateway.store.postgres import PostgresDriver

        return PostgresDriver(url)
    scheme = urlparse(url).scheme or url
    raise ValueError(f"unsupported database URL scheme {scheme!r}: use sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
