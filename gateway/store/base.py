"""The one interface both storage backends implement.

A backend hands out transactions (`Tx`) that run SQL written once with `?`
placeholders; `Queries` (the queries/ package) holds all the SQL and is the
only thing the core talks to (what differs by backend: dialect.py).

A unit awaits nothing but its `Queries`: on SQLite the statements run without
leaving the event loop, and a unit that slept would hold up the writer.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, TypeVar

if TYPE_CHECKING:
    from gateway.store.queries import Queries

T = TypeVar("T")


class Tx(Protocol):
    dialect: str

    async def one(self, sql: str, *args: Any) -> dict[str, Any] | None: ...

    async def all(self, sql: str, *args: Any) -> list[dict[str, Any]]: ...

    async def run(self, sql: str, *args: Any) -> int: ...

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...


Unit = Callable[["Queries"], Awaitable[T]]


class Driver(abc.ABC):
    """A backend.  The abstract methods are what every backend does; the
    others are optional features, each with a default built on `read` and
    `write` that a backend overrides where it can do better."""

    dialect: str
    url: str

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def write(self, unit: Unit[T], *, durable: bool = True) -> T:
        """Run `await unit(queries)` in one durable transaction and return its
        result only after the commit; an exception raised by the unit rolls
        back that unit alone and is re-raised.  With durable=False (telemetry
        such as recall records) the caller may be answered before the commit
        reaches the disk."""

    @abc.abstractmethod
    async def read(self, unit: Unit[T]) -> T:
        """Run `await unit(queries)` on a consistent snapshot."""

    @abc.abstractmethod
    async def ping(self) -> bool: ...

    async def read_then_write(
        self, read: Unit[T], write: Callable[[Queries, T], Awaitable[object]], *, durable: bool = True
    ) -> T:
        """`read` on a consistent snapshot, then `write(queries, its result)`
        committed as `write` commits (durable or not); returns what `read`
        returned.  By default a `read` and then a `write`, as on SQLite,
        whose single writer must not wait on searches."""
        result = await self.read(read)

        async def record(queries: Queries) -> None:
            await write(queries, result)

        await self.write(record, durable=durable)
        return result

    async def write_statement(self, unit: Unit[T]) -> T:
        """`write(unit)` for a unit that sends exactly one statement: a
        backend may run it as that statement's own transaction.  Same
        durability and retries as `write`."""
        return await self.write(unit)

    async def read_statement(self, unit: Unit[T]) -> T:
        """`read(unit)` for a unit that sends exactly one statement: a
        backend may run it as that statement's own (implicit) transaction,
        since one statement sees one snapshot anyway."""
        return await self.read(unit)
