"""The one interface both storage backends implement.

A backend hands out transactions (`Tx`): three ways to run SQL written once
with `?` placeholders, plus the few statements that differ by dialect
(full-text search, row locks).  `Queries` (queries.py) holds all the SQL and is
the only thing the core talks to; it never sees which backend it runs on.

    write(unit)  runs `await unit(queries)` in one durable transaction and
                 returns its result only after the commit; an exception raised
                 by the unit rolls back that unit alone and is re-raised.
                 With durable=False (telemetry such as recall records) the
                 caller may be answered before the commit reaches the disk.
    read(unit)   runs `await unit(queries)` on a consistent snapshot.

A unit awaits nothing but its `Queries`: on SQLite the statements run without
leaving the event loop, and a unit that slept would hold up the writer.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol, TypeVar

T = TypeVar("T")


class Tx(Protocol):
    dialect: str

    async def one(self, sql: str, *args: Any) -> dict[str, Any] | None: ...

    async def all(self, sql: str, *args: Any) -> list[dict[str, Any]]: ...

    async def run(self, sql: str, *args: Any) -> int: ...

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...


Unit = Callable[[Any], Awaitable[T]]


class Driver(Protocol):
    dialect: str
    url: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def write(self, unit: Unit[T], *, durable: bool = True) -> T: ...

    async def read(self, unit: Unit[T]) -> T: ...

    async def ping(self) -> bool: ...
