"""The PostgreSQL backend: SQL rewriting, transactions, retries, time limits,
migrations, and the recall index.

The pure helpers are tested without a server; the rest needs the server
named by RELAYROOM_TEST_POSTGRES_URL (`.ci/run` starts one) and skips, with
the reason, without it.
"""

from __future__ import annotations

import asyncio
import random
from decimal import Decimal
from typing import Any, AsyncIterator

import pytest

from gateway.core.errors import GatewayError, Unavailable
from gateway.hub import Hub
from gateway.store.postgres import PostgresDriver, _plain, affected_rows, redact, split_url, to_dollar_params
from gateway.store.schema import LATEST_VERSION
from tests.conftest import ProjectTokens, free_port
from tests.support.pg import open_postgres

# -- pure helpers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT ? , ?", "SELECT $1 , $2"),
        ("WHERE a = ? AND b IN (?, ?)", "WHERE a = $1 AND b IN ($2, $3)"),
        ("SELECT '?' AS q, ?", "SELECT '?' AS q, $1"),
        ("SELECT 'it''s ?' , ?", "SELECT 'it''s ?' , $1"),
        ('SELECT "odd?col" FROM t WHERE x = ?', 'SELECT "odd?col" FROM t WHERE x = $1'),
        ("SELECT ? -- why?\n, ?", "SELECT $1 -- why?\n, $2"),
        ("SELECT /* ? */ ?", "SELECT /* ? */ $1"),
        ("ESCAPE '\\' AND x = ?", "ESCAPE '\\' AND x = $1"),
        ("SELECT 1", "SELECT 1"),
    ],
)
def test_placeholders_become_numbered_outside_literals(sql: str, expected: str) -> None:
    assert to_dollar_params(sql) == expected


@pytest.mark.parametrize(
    ("status", "count"),
    [("INSERT 0 1", 1), ("INSERT 0 0", 0), ("UPDATE 3", 3), ("DELETE 12", 12), ("SELECT 1", 1), ("CREATE TABLE", 0), ("", 0)],
)
def test_affected_rows_from_status(status: str, count: int) -> None:
    assert affected_rows(status) == count


def test_driver_options_are_taken_out_of_the_url() -> None:
    dsn, options = split_url("postgres://app:pw@db.internal:5432/relayroom?pool_max=25&sslmode=require&statement_timeout_ms=900")
    assert dsn == "postgresql://app:pw@db.internal:5432/relayroom?sslmode=require"
    assert options == {"pool_min": 1, "pool_max": 25, "statement_timeout_ms": 900}
    with pytest.raises(ValueError, match="pool_max"):
        split_url("postgresql://db/x?pool_max=many")
    with pytest.raises(ValueError):
        split_url("postgresql://db/x?pool_min=5&pool_max=2")


def test_password_never_reaches_the_driver_url() -> None:
    assert redact("postgresql://app:s3cret@db:5432/relayroom") == "postgresql://app:***@db:5432/relayroom"
    assert "s3cret" not in PostgresDriver("postgresql://app:s3cret@db:5432/relayroom").url
    assert redact("postgresql://app@db/x") == "postgresql://app@db/x"


def test_numeric_aggregates_read_as_plain_numbers() -> None:
    assert _plain(Decimal("13")) == 13 and isinstance(_plain(Decimal("13")), int)
    assert _plain(Decimal("4.5")) == 4.5
    assert _plain("x") == "x"


# -- against a server ---------------------------------------------------------------


@pytest.fixture
async def driver() -> AsyncIterator[PostgresDriver]:
    async with open_postgres("?statement_timeout_ms=1500&pool_max=4") as d:
        yield d


async def test_schema_is_applied_once_and_reopening_changes_nothing(driver: PostgresDriver) -> None:
    assert await driver.read(lambda q: q.meta_get("schema_version")) == str(LATEST_VERSION)
    again = PostgresDriver(driver._dsn)
    await again.open()
    try:
        assert await again.read(lambda q: q.meta_get("schema_version")) == str(LATEST_VERSION)
    finally:
        await again.close()


async def test_a_newer_schema_is_refused(driver: PostgresDriver) -> None:
    await driver.write(lambda q: q.tx.run("UPDATE meta SET value = '999' WHERE key = 'schema_version'"))
    newer = PostgresDriver(driver._dsn)
    with pytest.raises(RuntimeError, match="upgrade the gateway"):
        await newer.open()


async def test_a_failing_unit_rolls_back_alone(driver: PostgresDriver) -> None:
    async def failing(q: Any) -> None:
        await q.tx.run("INSERT INTO meta(key, value) VALUES ('half', 'done')")
        raise GatewayError("refused", code="refused")

    with pytest.raises(GatewayError):
        await driver.write(failing)
    await driver.write(lambda q: q.tx.run("INSERT INTO meta(key, value) VALUES ('whole', 'done')"))
    assert await driver.read(lambda q: q.meta_get("half")) is None
    assert await driver.read(lambda q: q.meta_get("whole")) == "done"


async def test_a_deadlock_is_retried_until_both_units_commit(driver: PostgresDriver) -> None:
    """Two units lock two rows in opposite orders; PostgreSQL kills one, the
    driver runs it again, and both end committed."""
    await driver.write(lambda q: q.tx.run("INSERT INTO meta(key, value) VALUES ('a', '0'), ('b', '0')"))
    both_hold_one = asyncio.Barrier(2)
    runs = {"first": 0, "second": 0}

    def unit(name: str, order: tuple[str, str]) -> Any:
        async def go(q: Any) -> None:
            runs[name] += 1
            await q.tx.run("UPDATE meta SET value = value || '+' WHERE key = ?", order[0])
            if runs[name] == 1:  # the test's own rendezvous; real units await only queries
                await asyncio.wait_for(both_hold_one.wait(), 5)
            await q.tx.run("UPDATE meta SET value = value || '+' WHERE key = ?", order[1])

        return go

    await asyncio.wait_for(
        asyncio.gather(driver.write(unit("first", ("a", "b"))), driver.write(unit("second", ("b", "a")))), 30
    )
    assert sorted(runs.values()) == [1, 2]  # exactly one was run again
    assert await driver.read(lambda q: q.meta_get("a")) == "0++"
    assert await driver.read(lambda q: q.meta_get("b")) == "0++"


async def test_a_slow_statement_answers_503_not_forever(driver: PostgresDriver) -> None:
    with pytest.raises(Unavailable) as refused:
        await driver.read(lambda q: q.tx.one("SELECT pg_sleep(5) AS slept"))
    assert refused.value.code == "store_timeout" and refused.value.retry_after
    assert await driver.ping()


async def test_an_unreachable_server_is_a_clear_503() -> None:
    d = PostgresDriver(f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    with pytest.raises(Unavailable) as refused:
        await d.open()
    assert refused.value.code == "store_unavailable" and "127.0.0.1" in refused.value.message
    assert not await d.ping()


async def test_text_holding_nul_is_stored(driver: PostgresDriver) -> None:
    await driver.write(lambda q: q.tx.run("INSERT INTO meta(key, value) VALUES ('nul', ?)", "a\x00b"))
    assert await driver.read(lambda q: q.meta_get("nul")) == "a\ufffdb"


async def test_reads_cannot_write(driver: PostgresDriver) -> None:
    import asyncpg

    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
        await driver.read(lambda q: q.tx.run("INSERT INTO meta(key, value) VALUES ('r', 'w')"))


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_any_text_is_a_safe_word_for_the_index(hub: Hub, acme: ProjectTokens) -> None:
    """Whatever a word holds (quotes, backslashes, operators, colons), the
    index's statement reads it as text and never as tsquery syntax."""
    rng = random.Random(7)
    alphabet = "ab z'\\\":*&|!()<->-@#%_\n\t\x00é漢🚀"
    samples = ["", "'", "\\", "\\'", "''", "a:*", "x & y", "!(", "<->", "ts", "it's"]
    samples += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(400)]
    await _trusted(hub, acme, "Deploy logs rotate at midnight.")
    project = await hub.accounts.project(acme.slug)

    async def unit(q: Any) -> None:
        for text in samples:
            found = await q.lexical(project.id, [(text, 1.0), ("deploy", 0.25)], None, 5, 0.0)
            assert len(found) == 1

    await hub.driver.read(unit)


# -- the recall index, on both backends -------------------------------------------


async def _trusted(hub: Hub, tokens: ProjectTokens, statement: str, evidence: str | None = None, kind: str = "fact") -> str:
    writer = await hub.accounts.authenticate(tokens.writer)
    owner = await hub.accounts.authenticate(tokens.owner)
    entry, _ = await hub.knowledge.learn(writer, kind, statement, evidence)
    await hub.knowledge.confirm(owner, entry.id)
    return entry.id


async def test_recall_reads_only_its_own_project(hub: Hub, acme: ProjectTokens) -> None:
    from tests.conftest import make_project

    other = await make_project(hub, "globex")
    mine = await _trusted(hub, acme, "The staging database refuses prepared statements.")
    await _trusted(hub, other, "The staging database refuses prepared statements.")
    reader = await hub.accounts.authenticate(acme.reader)
    _, found = await hub.recall.recall(reader, "staging prepared statements")
    assert [e.id for e, _ in found] == [mine]


async def test_statement_outranks_evidence_and_index_follows_state(hub: Hub, acme: ProjectTokens) -> None:
    in_statement = await _trusted(hub, acme, "Rotate the webhook secret before each release.")
    in_evidence = await _trusted(hub, acme, "Release checklist lives in the wiki.", evidence="step four: rotate the webhook secret")
    reader = await hub.accounts.authenticate(acme.reader)
    _, found = await hub.recall.recall(reader, "rotate webhook secret")
    assert [e.id for e, _ in found][:2] == [in_statement, in_evidence]
    assert found[0][1] > found[1][1] > 0

    owner = await hub.accounts.authenticate(acme.owner)
    await hub.knowledge.refute(owner, in_statement, "no longer true")
    _, found = await hub.recall.recall(reader, "rotate webhook secret")
    assert [e.id for e, _ in found] == [in_evidence]


async def test_hostile_queries_answer_on_both_backends(hub: Hub, acme: ProjectTokens) -> None:
    await _trusted(hub, acme, "Quotes and operators like & | ! :* <-> are only text.")
    reader = await hub.accounts.authenticate(acme.reader)
    for query in ["'", "''", "\\", "a:*", "x & y", "!x", "(", "<->", "a' | 'b", "it's", "don't", "\x00", "é:* ő", "ω" * 300]:
        _, found = await hub.recall.recall(reader, query)
        assert isinstance(found, list)
    _, found = await hub.recall.recall(reader, "operators text")
    assert len(found) == 1


def test_serve_without_its_database_says_why_in_one_line(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    env["RELAYROOM_DATABASE_URL"] = f"postgresql://relayroom:s3cret@127.0.0.1:{free_port()}/relayroom"
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--port", str(free_port())],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot connect to PostgreSQL" in last and "127.0.0.1" in last
    assert "s3cret" not in result.stderr + result.stdout and "Traceback" not in result.stderr


async def test_a_non_durable_write_commits_without_waiting_for_the_flush(driver: PostgresDriver) -> None:
    async def unit(q: Any) -> str:
        await q.tx.run("INSERT INTO meta(key, value) VALUES ('telemetry', 'kept')")
        row = await q.tx.one("SELECT current_setting('synchronous_commit') AS mode")
        return row["mode"]

    assert await driver.write(unit, durable=False) == "off"
    assert await driver.read(lambda q: q.meta_get("telemetry")) == "kept"
    # The setting was the transaction's own: the next unit waits for its flush again.
    assert await driver.write(lambda q: q.tx.one("SELECT current_setting('synchronous_commit') AS mode")) == {"mode": "on"}


async def test_requests_wait_for_a_connection_in_arrival_order(driver: PostgresDriver) -> None:
    """With every connection busy, requests are served first come first
    served (the pool alone lets a newcomer overtake a woken waiter), and a
    wait past the limit is a clear 503."""
    single = PostgresDriver(driver._dsn + "?pool_max=1")
    await single.open()
    try:
        release = asyncio.Event()

        async def hold(q: Any) -> None:
            await q.tx.one("SELECT 1 AS one")
            await release.wait()

        holder = asyncio.create_task(single.write(hold))
        await asyncio.sleep(0.2)
        order: list[int] = []

        def waiter(n: int) -> Any:
            async def unit(q: Any) -> None:
                order.append(n)
                await q.tx.one("SELECT 1 AS one")
            return unit

        queued = []
        for n in range(12):
            queued.append(asyncio.create_task(single.write(waiter(n))))
            await asyncio.sleep(0.005)
        with pytest.raises(Unavailable) as busy:
            async with single._acquire(timeout=0.2):
                pass
        assert busy.value.code == "store_busy"
        release.set()
        await asyncio.gather(holder, *queued)
        assert order == list(range(12))
    finally:
        await single.close()


async def test_a_connection_is_reused_after_a_refusal_and_dropped_after_a_cancel(driver: PostgresDriver) -> None:
    """The driver's own connection stack (`pg_connections`): a unit's refusal
    or a server error leaves a connection that answers the next unit; a
    cancelled unit's connection may still have its statement running, so a
    new one serves the next unit, at once."""
    pids: list[int] = []

    async def refused(q: Any) -> None:
        pids.append((await q.tx.one("SELECT pg_backend_pid() AS pid"))["pid"])
        raise GatewayError("refused", code="refused")

    with pytest.raises(GatewayError):
        await driver.write(refused)
    with pytest.raises(Exception):
        await driver.write(lambda q: q.tx.run("SELECT * FROM no_such_table"))
    assert (await driver.read(lambda q: q.tx.one("SELECT pg_backend_pid() AS pid")))["pid"] == pids[0]

    started = asyncio.Event()

    async def slow(q: Any) -> None:
        pids.append((await q.tx.one("SELECT pg_backend_pid() AS pid"))["pid"])
        started.set()
        await q.tx.run("SELECT pg_sleep(1.2)")

    task = asyncio.create_task(driver.write(slow))
    await started.wait()
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    quick = await asyncio.wait_for(driver.read(lambda q: q.tx.one("SELECT pg_backend_pid() AS pid")), 1.0)
    assert quick["pid"] != pids[1]
