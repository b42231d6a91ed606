"""PostgreSQL backend: asyncpg connections, one transaction per write unit.

Why it looks the way it does:

- Several gateway processes (on several hosts) share one database, so every
  fact that must hold across them is decided inside a transaction: rows that a
  unit reads and then decides on are locked (`SELECT ... FOR UPDATE`, or an
  advisory transaction lock through `Queries.serialize`), and the stores of
  "seen once" keys are primary keys written with `INSERT ... ON CONFLICT`.
- Write units run at READ COMMITTED: a statement that waited for a row lock
  sees the row as the other transaction committed it, which is what
  "promote exactly once" needs.  A unit that loses a deadlock or a
  serialization check is rolled back and run again from the start (its reads
  are repeated, so its decision is remade on fresh facts); a unique violation
  is retried too, because it means a concurrent unit inserted the row this one
  looked for and did not find, and the rerun sees it.
- Reads run in a read-only REPEATABLE READ transaction: one snapshot for the
  whole unit, never a serialization failure.
- `read_then_write` (a recall and its record) runs both units in one
  REPEATABLE READ transaction: the write part only inserts, so it neither
  waits on nor takes a lock that another unit could want, and the recall
  costs one BEGIN/COMMIT instead of two.
- A unit of one statement (`write_statement`, `read_statement`) runs
  without BEGIN/COMMIT: the statement is its own transaction, one round
  trip in all.
- A non-durable transaction opens with `BEGIN; SET LOCAL synchronous_commit
  TO OFF` sent as one simple query (one round trip instead of two).
- Every statement has a time limit (`statement_timeout`), so a stuck query
  answers 503 with Retry-After instead of holding a request forever.

The URL may carry driver options as query parameters, removed before
connecting: `pool_min` (default 1), `pool_max` (default 10) and
`statement_timeout_ms` (default 15000).  Anything else in the URL goes to
asyncpg/libpq unchanged (e.g. `sslmode=require`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import re
from decimal import Decimal
from functools import lru_cache
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from gateway.core.errors import Conflict, GatewayError, Unavailable
from gateway.store.base import Driver, T, Unit
from gateway.store import recall_index_pg
from gateway.store.pg_connections import Connections
from gateway.store.queries import Queries
from gateway.store.schema import META_TABLE, SET_META, expand, upgrades

log = logging.getLogger("relayroom.store")

# Any fixed 64-bit number: every gateway process takes this advisory lock to
# migrate, so two processes starting at once apply each migration once.
MIGRATION_LOCK = 0x52524D4947524154  # "RRMIGRAT"
WRITE_ATTEMPTS = 6
UNIQUE_ATTEMPTS = 2
CONNECT_TIMEOUT = 10.0
DRIVER_OPTIONS = {"pool_min": 1, "pool_max": 10, "statement_timeout_ms": 15000}

_COUNT = re.compile(r"(\d+)\s*$")
_QUOTED_OR_MARK = re.compile(r"'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?|--[^\n]*|/\*.*?(?:\*/|\Z)|\?", re.S)


@lru_cache(maxsize=4096)
def to_dollar_params(sql: str) -> str:
    """Rewrite `?` placeholders to `$1..$n`, leaving `?` inside string
    literals, quoted identifiers and comments alone."""
    numbers = itertools.count(1)
    return _QUOTED_OR_MARK.sub(lambda m: f"${next(numbers)}" if m.group() == "?" else m.group(), sql)


def affected_rows(status: str) -> int:
    """The row count of an asyncpg status string ("INSERT 0 1", "UPDATE 3")."""
    match = _COUNT.search(status or "")
    return int(match.group(1)) if match else 0


def _plain(value: Any) -> Any:
    # SUM/AVG answer NUMERIC on PostgreSQL; the core (and JSON) wants the
    # int or float SQLite would have given.
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    # PostgreSQL text cannot hold U+0000, which SQLite stores.  Validation
    # refuses it in entries; free text that is only recorded (a recall's
    # query) keeps a visible replacement rather than failing the request.
    if any(isinstance(a, str) and "\x00" in a for a in args):
        return tuple(a.replace("\x00", "\ufffd") if isinstance(a, str) else a for a in args)
    return args


def _row(record: Any) -> dict[str, Any]:
    return {key: _plain(value) for key, value in record.items()}


def split_url(url: str) -> tuple[str, dict[str, int]]:
    """Separate this driver's options from the URL asyncpg connects with."""
    parts = urlparse(url)
    options = dict(DRIVER_OPTIONS)
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in options:
            try:
                options[key] = int(value)
            except ValueError:
                raise ValueError(f"database URL option {key}={value!r} must be an integer") from None
        else:
            kept.append((key, value))
    if options["pool_min"] < 0 or options["pool_max"] < 1 or options["pool_min"] > options["pool_max"]:
        raise ValueError("database URL options need 0 <= pool_min <= pool_max and pool_max >= 1")
    scheme = "postgresql" if parts.scheme == "postgres" else parts.scheme
    return urlunparse(parts._replace(scheme=scheme, query=urlencode(kept))), options


def redact(url: str) -> str:
    """The URL without its password, for log lines and errors."""
    parts = urlparse(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    return urlunparse(parts._replace(netloc=f"{user}:***@{netloc}"))


class PostgresTx:
    dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def one(self, sql: str, *args: Any) -> dict[str, Any] | None:
        record = await self._conn.fetchrow(to_dollar_params(sql), *_args(args))
        return _row(record) if record is not None else None

    async def all(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        return [_row(r) for r in await self._conn.fetch(to_dollar_params(sql), *_args(args))]

    async def run(self, sql: str, *args: Any) -> int:
        return affected_rows(await self._conn.execute(to_dollar_params(sql), *_args(args)))

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            await self._conn.executemany(to_dollar_params(sql), [_args(row) for row in rows])


class PostgresDriver(Driver):
    dialect = "postgres"

    def __init__(self, url: str) -> None:
        self._dsn, self._options = split_url(url)
        self.url = redact(self._dsn)
        self._pool: Connections | None = None
        self._gate = asyncio.Semaphore(1)  # made again, for the pool's size and this loop, by open()

    # -- lifecycle --------------------------------------------------------------

    async def open(self) -> None:
        import asyncpg

        timeout_ms = self._options["statement_timeout_ms"]
        self._gate = asyncio.Semaphore(self._options["pool_max"])

        connections = Connections(functools.partial(
            asyncpg.connect,
            self._dsn,
            timeout=CONNECT_TIMEOUT,
            command_timeout=timeout_ms / 1000 + 5,
            server_settings={
                "statement_timeout": str(timeout_ms),
                # A unit awaits only its queries; a transaction idle this
                # long belongs to a process that hung, so free its locks.
                "idle_in_transaction_session_timeout": str(max(60000, 4 * timeout_ms)),
                "application_name": "relayroom-gateway",
            },
        ))
        try:
            await connections.fill(self._options["pool_min"])
        except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
            connections.terminate()
            raise Unavailable(
                f"cannot connect to PostgreSQL at {self.url}: {type(exc).__name__}: {exc}",
                code="store_unavailable",
                retry_after=5,
            ) from None
        self._pool = connections
        try:
            conn = await asyncpg.connect(self._dsn, timeout=30)
            try:
                await self._migrate(conn)
            finally:
                await conn.close()
        except BaseException:
            await connections.close(10)
            self._pool = None
            raise

    async def _migrate(self, conn: Any) -> None:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
        try:
            async with _transaction(conn, "BEGIN"):
                tx = PostgresTx(conn)
                await tx.run(expand(META_TABLE, self.dialect))
                row = await tx.one("SELECT value FROM meta WHERE key = 'schema_version'")
                for version, statements in upgrades(int(row["value"]) if row else 0, self.dialect):
                    for sql in statements:
                        await tx.run(sql)
                    await tx.run(SET_META, "schema_version", str(version))
                # The recall index's text search configuration, and its
                # tables rebuilt when they were built another way.
                await recall_index_pg.install(tx)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close(10)

    async def ping(self) -> bool:
        try:
            async with self._acquire(timeout=2) as conn:
                return bool(await conn.fetchval("SELECT 1") == 1)
        except Exception:  # readiness reports the failure; it never raises
            return False

    # -- units ------------------------------------------------------------------

    async def write(self, unit: Unit[T], *, durable: bool = True) -> T:
        """Run `unit` in one transaction, again from the start after a
        deadlock or serialization failure."""
        return await self._write(unit, durable=durable, snapshot=False)

    async def write_statement(self, unit: Unit[T]) -> T:
        return await self._write(unit, durable=True, snapshot=False, single=True)

    async def read_then_write(
        self, read: Unit[T], write: Callable[[Queries, T], Awaitable[object]], *, durable: bool = True
    ) -> T:
        """Both units in one REPEATABLE READ transaction, retried like `write`
        if it ever fails a serialization check."""

        async def unit(queries: Queries) -> T:
            result = await read(queries)
            await write(queries, result)
            return result

        return await self._write(unit, durable=durable, snapshot=True)

    async def _write(self, unit: Unit[T], *, durable: bool, snapshot: bool, single: bool = False) -> T:
        import asyncpg

        retryable = (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)
        attempt = 0
        unique_failures = 0
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ" if snapshot else "BEGIN"
        if not durable:
            begin += "; SET LOCAL synchronous_commit TO OFF"
        while True:
            attempt += 1
            try:
                with _server_faults("write"):
                    async with self._acquire() as conn:
                        if single:
                            return await unit(Queries(PostgresTx(conn)))
                        async with _transaction(conn, begin):
                            return await unit(Queries(PostgresTx(conn)))
            except retryable as exc:
                if attempt >= WRITE_ATTEMPTS:
                    raise Unavailable(
                        "the store is busy with conflicting writes; retry shortly", code="store_busy", retry_after=1
                    ) from None
                log.debug("write unit retried after %s (attempt %d)", exc.sqlstate, attempt)
            except asyncpg.UniqueViolationError as exc:
                unique_failures += 1
                if unique_failures >= UNIQUE_ATTEMPTS or attempt >= WRITE_ATTEMPTS:
                    log.info("write refused: %s", exc.constraint_name)
                    raise Conflict(
                        "a concurrent request wrote the same record; reload and retry", code="write_conflict"
                    ) from None
            # Jitter, so that two processes that collided do not collide again.
            await asyncio.sleep(random.uniform(0.002, 0.01) * attempt)

    async def read(self, unit: Unit[T]) -> T:
        with _server_faults("read"):
            async with self._acquire() as conn:
                async with _transaction(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"):
                    return await unit(Queries(PostgresTx(conn)))

    async def read_statement(self, unit: Unit[T]) -> T:
        with _server_faults("read"):
            async with self._acquire() as conn:
                return await unit(Queries(PostgresTx(conn)))

    @contextlib.asynccontextmanager
    async def _acquire(self, timeout: float = 10.0) -> AsyncIterator[Any]:
        import asyncpg

        if self._pool is None:
            raise Unavailable("the store is not open", code="store_unavailable", retry_after=1)
        # Requests queue here, first come first served: asyncpg's pool let a
        # newcomer take a connection released for a woken waiter, which then
        # queued again at the back and made the tail (docs/decisions/0010).
        pool, gate = self._pool, self._gate
        try:
            async with asyncio.timeout(timeout):
                await gate.acquire()
                try:
                    # The gate has a place per connection, so this takes an
                    # idle one or opens one (under this timeout).
                    conn = await pool.take()
                except BaseException:
                    gate.release()
                    raise
        except TimeoutError:
            raise Unavailable(
                "every store connection is busy; retry shortly", code="store_busy", retry_after=1
            ) from None
        reusable = False
        try:
            yield conn
            reusable = True
        except asyncpg.PostgresError:
            reusable = True  # the server answered: the connection is ready for the next statement
            raise
        except GatewayError:
            reusable = True  # the unit's own refusal, between statements (its transaction was rolled back)
            raise
        finally:
            pool.give_back(conn, reusable)
            gate.release()


@contextlib.asynccontextmanager
async def _transaction(conn: Any, begin: str) -> AsyncIterator[None]:
    """A transaction opened by `begin`, a simple query that may hold more
    than BEGIN (`SET LOCAL ...`: one round trip for both), committed when the
    block ends and rolled back if it raises.  A ROLLBACK that fails (the
    connection is gone) leaves the first error to propagate; the connection
    is then not used again (`pg_connections`)."""
    try:
        await conn.execute(begin)
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            await conn.execute("ROLLBACK")
        raise
    await conn.execute("COMMIT")


# SQLSTATE classes of the server's own trouble: connection exceptions,
# insufficient resources, operator intervention, system errors.
_SERVER_TROUBLE_CLASSES = ("08", "53", "57", "58")


def _server_trouble(exc: Exception) -> bool:
    return str(getattr(exc, "sqlstate", "") or "").startswith(_SERVER_TROUBLE_CLASSES)


@contextlib.contextmanager
def _server_faults(operation: str) -> Iterator[None]:
    """Turn the server's own trouble into a 503 the client retries: a slow
    statement, a lost connection, resource limits or a shutdown.  Anything
    else (a conflict the caller handles, a bug) passes through untouched."""
    import asyncpg

    try:
        yield
    except (asyncpg.QueryCanceledError, asyncio.TimeoutError):
        raise Unavailable("the store took too long to answer; retry", code="store_timeout", retry_after=1) from None
    except (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError) as exc:
        log.warning("store connection failed during a %s: %s", operation, type(exc).__name__)
        raise Unavailable("the store is unavailable; retry shortly", code="store_unavailable", retry_after=1) from None
    except asyncpg.PostgresError as exc:
        if not _server_trouble(exc):
            raise
        log.error("store error during a %s: %s (%s)", operation, type(exc).__name__, exc.sqlstate)
        raise Unavailable(
            f"the store could not complete the {operation}; retry shortly", code="store_error", retry_after=1
        ) from None
