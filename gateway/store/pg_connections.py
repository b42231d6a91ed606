"""The PostgreSQL driver's connections: opened when needed, reused while
clean, dropped when not.

Why not asyncpg's `Pool`: taking a connection from it and giving it back
cost as much CPU as the query itself with nobody waiting (its release runs
in a task of its own under `asyncio.shield`, its acquire with a timeout
under `wait_for`, another task), on every unit (docs/decisions/0010).  The driver
already queues its callers, first come first served, with one place per
connection (its gate), and a unit leaves no session state behind (no SET,
LISTEN or session locks), so what is left to do is a stack of idle
connections and the rule for when one may be used again:

- after a unit that ended normally, or with an error the server reported
  (the connection answered and is ready for the next statement), unless a
  transaction is still open on it;
- never after anything else: a cancelled unit (a client gone, a timeout) may
  leave a statement in flight or a cancel request pending, a lost
  connection is lost.  It is closed, and a new one is opened when next
  needed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Awaitable, Callable


class Connections:
    def __init__(self, connect: Callable[[], Awaitable[Any]]) -> None:
        self._connect = connect
        self._idle: list[Any] = []
        self._open: set[Any] = set()

    async def fill(self, count: int) -> None:
        """Open `count` connections now (a store that cannot be reached fails at start)."""
        for _ in range(count - len(self._idle)):
            self._idle.append(await self._new())

    async def _new(self) -> Any:
        conn = await self._connect()
        self._open.add(conn)
        return conn

    async def take(self) -> Any:
        """An idle connection (the one used last: its caches are warm), else a new one.

        The caller bounds how many are taken at once."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
            self._open.discard(conn)
        return await self._new()

    def give_back(self, conn: Any, reusable: bool) -> None:
        """`reusable`: the unit ended normally or with an error the server answered."""
        if reusable and not conn.is_closed() and not conn.is_in_transaction():
            self._idle.append(conn)
            return
        self._open.discard(conn)
        conn.terminate()

    async def close(self, timeout: float) -> None:
        """Close the idle connections politely and end any still in use."""
        idle, self._idle = self._idle, []
        busy = self._open.difference(idle)
        self._open.clear()
        for conn in busy:
            conn.terminate()
        if idle:
            try:
                await asyncio.wait_for(asyncio.gather(*(conn.close() for conn in idle), return_exceptions=True), timeout)
            except asyncio.TimeoutError:
                for conn in idle:
                    with contextlib.suppress(Exception):
                        conn.terminate()

    def terminate(self) -> None:
        for conn in self._open:
            conn.terminate()
        self._open.clear()
        self._idle.clear()
