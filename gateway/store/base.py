"""The one interface both storage backends implement.

A backend hands out transactions (`Tx`) that run SQL written once with `?`
placeholders; `Queries` (the queries/ package) holds all the SQL and is the
only thing the core talks to (what differs by backend: dialect.py).

    write(unit)  runs `await unit(queries)` in one durable transaction and
                 returns its result only after the commit; an exception raised
                 by the unit rolls back that unit alone and is re-raised.
                 With durable=False (telemetry such as recall records) the
                 caller may be answered before the commit reaches the disk.
    read(unit)   runs `await unit(queries)` on a consistent snapshot.

`read_then_write(driver, read, write)` runs a read, then a write recording
what it found (a recall and its record): in one transaction where the driver
offers it (PostgreSQL), else as `read` then `write` (SQLite's single writer
must not wait on searches).

`write_statement(driver, unit)` (below) is `write` for a unit that sends
exactly one statement: a driver may run it as that statement's own
transaction (PostgreSQL: no BEGIN/COMMIT, one round trip instead of three).
`read_statement(driver, unit)` is the same for `read` (a single statement
reads one snapshot by itself): the bearer token's lookup on every request.

A unit awaits nothing but its `Queries`: on SQLite the statements run without
leaving the event loop, and a unit that slept would hold up the writer.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol, TypeVar, cast

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


async def read_then_write(
    driver: Driver, read: Unit[T], write: Callable[[Any, T], Awaitable[Any]], *, durable: bool = True
) -> T:
    """`read` on a consistent snapshot, then `write(queries, its result)`
    committed as `Driver.write` commits (durable or not); returns what `read`
    returned.  In one transaction where the driver offers it
    (`read_then_write` method), else a `read` and a `write`."""
    combined = getattr(driver, "read_then_write", None)
    if combined is not None:
        return cast(T, await combined(read, write, durable=durable))
    result = await driver.read(read)

    async def record(queries: Any) -> None:
        await write(queries, result)

    await driver.write(record, durable=durable)
    return result


async def write_statement(driver: Driver, unit: Unit[T]) -> T:
    """`driver.write(unit)` for a unit that sends exactly one statement, as
    that statement's own transaction where the driver offers it
    (`write_statement` method); same durability and retries as `write`."""
    single = getattr(driver, "write_statement", None)
    if single is not None:
        return cast(T, await single(unit))
    return await driver.write(unit)


async def read_statement(driver: Driver, unit: Unit[T]) -> T:
    """`driver.read(unit)` for a unit that sends exactly one statement, as
    that statement's own (implicit) transaction where the driver offers it
    (`read_statement` method): one statement sees one snapshot anyway."""
    single = getattr(driver, "read_statement", None)
    if single is not None:
        return cast(T, await single(unit))
    return await driver.read(unit)
