"""`relayroom export` / `relayroom import`: a project moves between hubs and
between SQLite and PostgreSQL with nothing lost.

"Nothing lost" is checked the strict way: the project exported again from
the hub it was imported into is the same file, record for record (only the
header's time and backend differ); tokens still authenticate, recall still
finds the same entries in the same order.
"""

from __future__ import annotations

import contextlib
import io
from hashlib import sha256
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from gateway.core.clock import HOUR, ManualClock
from gateway.core.config import Config
from gateway.core.errors import Conflict, GatewayError
from gateway.hub import Hub
from gateway.knowledge.model import Support
from gateway.store.dialect import DIALECTS
from gateway.store.transfer_sql import DERIVED_TABLES, HUB_TABLES, TABLES
from gateway.knowledge.transfer import TransferError, export_project, import_project, write_jsonl
from tests.conftest import ProjectTokens, make_project
from tests.support.helpers import snapshot


@contextlib.asynccontextmanager
async def open_hub(backend: str, folder: Path, clock: ManualClock) -> AsyncIterator[Hub]:
    async with contextlib.AsyncExitStack() as stack:
        if backend == "sqlite":
            folder.mkdir(parents=True, exist_ok=True)
            url = f"sqlite:///{folder / 'target.db'}"
        else:
            from tests.support.pg import fresh_database

            url = stack.enter_context(fresh_database())
        hub = Hub(Config.from_env({}, database_url=url, sweep_interval=0.0), clock=clock)
        await hub.start(background=False)
        stack.push_async_callback(hub.stop)
        yield hub


async def build_rich_project(hub: Hub, clock: ManualClock) -> ProjectTokens:
    """A project holding a row of every kind an export carries."""
    tokens = await make_project(hub, "acme")
    await hub.accounts.create_token("acme", "write", "retired-agent")
    await hub.accounts.revoke_tokens("acme", "retired-agent")
    owner = await hub.accounts.authenticate(tokens.owner)
    writer = await hub.accounts.authenticate(tokens.writer)
    other = await hub.accounts.authenticate(tokens.other_writer)
    await hub.accounts.update_settings(owner, {"window_days": 10, "demotions_per_hour": 2})
    await hub.accounts.set_playbook(owner, "# Acme\n\nBe kind to the pooler. ✓\n")
    owner = await hub.accounts.authenticate(tokens.owner)  # a principal carries the settings of its request

    learned = [
        (await hub.knowledge.learn(writer, kind, statement, evidence))[0]
        for kind, statement, evidence in [
            ("pitfall", "The pooler cannot do prepared statements.", "Seen in incident 42."),
            ("convention", "Tests live beside the files they test.", None),
            ("decision", "We chose PostgreSQL for more than one process.", "See docs/deployment.md"),
            ("fact", "Staging migrations run before production.", None),
            ("fact", "A fact that will expire.", None),
            ("fact", "A candidate nobody confirmed.", '{"json": "looking" }'),
        ]
    ]
    project = await hub.accounts.project("acme")

    async def attest(entry_id: str, issuer: str, check: str, attestation_id: str) -> None:
        now = hub.clock.now()

        async def unit(q: Any) -> None:
            await q.insert_attestation(attestation_id, project.id, issuer, check, "success", True, None, {"run_id": "9", "sha": "abc"}, "https://ci/run/9", now)
            await hub.knowledge.apply_support(q, project, entry_id, Support(issuer, check, attestation_id, now), now)

        await hub.driver.write(unit)

    await attest(learned[0].id, "oidc:ci-a.example.com:acme", "pooler-test", "at_A1")
    clock.advance(1.5)
    await attest(learned[0].id, "oidc:ci-b.example.com:acme", "pooler-test", "at_B1")  # promotes
    await hub.knowledge.confirm(owner, learned[1].id)
    await hub.knowledge.confirm(owner, learned[2].id)
    await hub.knowledge.confirm(owner, learned[3].id)
    await hub.knowledge.post_event(other, "error", {"contradicts": learned[3].id, "why": "staging was skipped"})
    await hub.knowledge.post_event(other, "deploy", {"sha": "abc"})
    await hub.knowledge.refute(owner, learned[2].id, "we moved on")
    await hub.knowledge.refute(owner, learned[5].id, "never true")
    with pytest.raises(GatewayError):  # over the budget of 2: a rate_limited row and mark
        await hub.knowledge.refute(owner, learned[1].id, "third in an hour")
    await hub.driver.write(lambda q: q.tx.run("UPDATE entries SET expires_at = ? WHERE id = ?", clock.now() + HOUR, learned[4].id))

    proposals = hub.proposals
    approved = await proposals.propose(writer, "convention", "Name branches after tickets.", "Seen in ten PRs.")
    await proposals.approve(owner, approved.id)
    rejected = await proposals.propose(writer, "fact", "The moon is cheese.", "Trust me.")
    await proposals.reject(owner, rejected.id, "no")
    await proposals.propose(writer, "pitfall", "Pending proposal.", "Noticed twice.")
    await hub.threads.post_message(writer, "thread-1", "dana", "Remember: the pooler cannot do prepared statements!")

    reader = await hub.accounts.authenticate(tokens.reader)
    recall_id, found = await hub.recall.recall(reader, "pooler prepared statements")
    assert found
    await hub.recall.used(reader, recall_id, found[0][0].id)
    await hub.recall.recall(reader, "nothing matches this at all")
    clock.advance(2 * HOUR)
    await hub.knowledge.sweep()  # the expiring fact is retired, with its audit row

    async def publish(q: Any) -> None:  # as gateway/ci/publish.py writes them: one in force, one waiting
        run = {"repository": "acme/api", "commit": "abc", "url": "https://ci/run/9"}
        for state, refs in (("in_force", "[main]"), ("pending", "[main, next]")):
            text = PUBLISHED.format(refs=refs)
            await q.insert_published(project.id, "checkmaps/acme.yaml", text, sha256(text.encode()).hexdigest(), state,
                                     run, clock.now())

    await hub.driver.write(publish)
    return tokens


PUBLISHED = "project: acme\nissuers:\n  - provider: gitlab\n    project_id: \"42\"\n    refs: {refs}\n"


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("exported_at", "from")} for r in records]


def as_lines(records: list[dict[str, Any]]) -> list[str]:
    out = io.StringIO()
    write_jsonl(records, out)
    return out.getvalue().splitlines(keepends=True)


PAIRS = [("sqlite", "sqlite"), ("sqlite", "postgres"), ("postgres", "sqlite"), ("postgres", "postgres")]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
async def test_round_trip_loses_nothing(source: str, target: str, tmp_path: Path, clock: ManualClock) -> None:
    async with open_hub(source, tmp_path / "source", clock) as origin:
        tokens = await build_rich_project(origin, clock)
        exported = await export_project(origin.driver, origin.clock, "acme")
        reader = await origin.accounts.authenticate(tokens.reader)
        _, before = await origin.recall.recall(reader, "pooler prepared statements tests")
        before_ids = [e.id for e, _ in before]
        before_json = [e.to_json(clock.now()) for e in (await origin.knowledge.list(await origin.accounts.authenticate(tokens.owner), limit=100))[0]]

    counts = exported[-1]["counts"]
    assert counts["entry"] == 7 and counts["proposal"] == 3 and counts["thread_message"] == 1
    assert counts["attestation"] == 2 and counts["recall"] == 2 and counts["token"] == 5
    assert counts["event"] >= 2 and counts["audit"] >= 15 and counts["rate_limit_mark"] == 1
    assert counts["published_checkmap"] == 2

    async with open_hub(target, tmp_path / "target", clock) as destination:
        await destination.checkmaps.refresh(destination.driver)  # a serving gateway, polling
        summary = await import_project(destination.driver, as_lines(exported))
        assert summary.counts == counts
        await destination.checkmaps.refresh(destination.driver)  # its next poll: the generation moved
        assert destination.checkmaps.snapshot.maps["acme"].sha256 == sha256(PUBLISHED.format(refs="[main]").encode()).hexdigest()
        again = await export_project(destination.driver, destination.clock, "acme")
        assert comparable(again) == comparable(exported)

        owner = await destination.accounts.authenticate(tokens.owner)
        after_json = [e.to_json(clock.now()) for e in (await destination.knowledge.list(owner, limit=100))[0]]
        assert after_json == before_json
        reader = await destination.accounts.authenticate(tokens.reader)  # tokens moved with the project
        _, after = await destination.recall.recall(reader, "pooler prepared statements tests")
        assert [e.id for e, _ in after] == before_ids  # the recall index was rebuilt
        with pytest.raises(GatewayError):
            await destination.accounts.authenticate("rr_not-a-token")
        # The imported project works on: a new candidate and the ledger continue.
        writer = await destination.accounts.authenticate(tokens.writer)
        entry, duplicate = await destination.knowledge.learn(writer, "fact", "Learned after the move.")
        assert not duplicate and entry.state == "candidate"


@pytest.mark.parametrize("source", ["sqlite", "postgres"])
async def test_import_into_sqlite_counts_the_returned_entries(source: str, tmp_path: Path, clock: ManualClock) -> None:
    """The recall counters are not in the file: an import into SQLite
    derives them from the results it carried, in the same transaction."""
    async with open_hub(source, tmp_path / "source", clock) as origin:
        tokens = await build_rich_project(origin, clock)
        reader = await origin.accounts.authenticate(tokens.reader)
        for query in ("pooler prepared statements", "tests beside files", "pooler"):
            await origin.recall.recall(reader, query)
        exported = await export_project(origin.driver, origin.clock, "acme")
    returned: dict[str, int] = {}
    for record in (r for r in exported if r["record"] == "recall"):
        for result in record["results"]:
            returned[result["entry"]] = returned.get(result["entry"], 0) + 1
    assert max(returned.values()) >= 2

    async with open_hub("sqlite", tmp_path / "target", clock) as destination:
        await import_project(destination.driver, as_lines(exported))
        rows = await destination.driver.read(lambda q: q.tx.all(
            "SELECT e.id, c.returned FROM recall_counts c JOIN entries e ON e.seq = c.entry_seq"))
        assert {r["id"]: r["returned"] for r in rows} == returned
        owner = await destination.accounts.authenticate(tokens.owner)
        for entry_id, times in returned.items():
            _, history_returned, _ = await destination.ledger.entry_history(owner, await destination.knowledge.get(owner, entry_id))
            assert history_returned == times


async def test_import_refuses_an_existing_project_and_changes_nothing(hub: Hub, clock: ManualClock) -> None:
    await build_rich_project(hub, clock)
    lines = as_lines(await export_project(hub.driver, hub.clock, "acme"))
    before = await snapshot(hub)
    with pytest.raises(Conflict) as refused:
        await import_project(hub.driver, lines)
    assert refused.value.code == "project_exists"
    assert await snapshot(hub) == before


async def test_import_refuses_ids_the_hub_already_holds(hub: Hub, clock: ManualClock) -> None:
    await build_rich_project(hub, clock)
    records = await export_project(hub.driver, hub.clock, "acme")
    renamed = [dict(r) for r in records]
    renamed[0]["project"] = renamed[1]["slug"] = "acme-copy"
    before = await snapshot(hub)
    with pytest.raises(Conflict) as refused:
        await import_project(hub.driver, as_lines(renamed))
    assert refused.value.code == "ids_exist"
    assert await snapshot(hub) == before


def _broken(records: list[dict[str, Any]], how: str) -> list[str]:
    lines = as_lines(records)
    entry_line = next(i for i, line in enumerate(lines) if '"record":"entry"' in line)
    if how == "cut short":
        return lines[:-1]
    if how == "a line lost":
        return lines[:entry_line] + lines[entry_line + 1 :]
    record = json.loads(lines[entry_line])
    if how == "wrong type":
        record["created_at"] = "yesterday"
    elif how == "unknown field":
        record["trusted_forever"] = True
    elif how == "bad state":
        record["state"] = "blessed"
    elif how == "not json":
        return lines[:entry_line] + ["{not json\n"] + lines[entry_line + 1 :]
    return lines[:entry_line] + [json.dumps(record) + "\n"] + lines[entry_line + 1 :]


@pytest.mark.parametrize("how", ["cut short", "a line lost", "wrong type", "unknown field", "bad state", "not json"])
async def test_a_damaged_file_is_refused_whole(hub: Hub, clock: ManualClock, how: str, tmp_path: Path) -> None:
    async with open_hub("sqlite", tmp_path / "source", clock) as origin:
        await build_rich_project(origin, clock)
        records = await export_project(origin.driver, origin.clock, "acme")
    before = await snapshot(hub)
    with pytest.raises(TransferError):
        await import_project(hub.driver, _broken(records, how))
    assert await snapshot(hub) == before


@pytest.mark.parametrize("text", ["", "\n\n", '{"record": "header", "format": "other"}\n', "[1, 2]\n", "\ufeffnot even json\n"])
async def test_not_an_export_is_refused(hub: Hub, text: str) -> None:
    with pytest.raises(TransferError):
        await import_project(hub.driver, io.StringIO(text))


async def test_every_column_of_the_schema_is_carried_or_named_hub_level_or_derived(hub: Hub) -> None:
    """A column added to a project table later must be added to the export too."""
    if hub.driver.dialect == "sqlite":
        tables = [r["name"] for r in await hub.driver.read(lambda q: q.tx.all(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'fts_%' AND name NOT LIKE 'sqlite_%'"))]

        async def columns(table: str) -> set[str]:
            return {r["name"] for r in await hub.driver.read(lambda q: q.tx.all(f"PRAGMA table_info({table})"))}
    else:
        tables = [r["table_name"] for r in await hub.driver.read(lambda q: q.tx.all(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            # The recall index, its kept counts and postings: rebuilt by the import's own writes.
            "AND table_name NOT LIKE 'recall\\_p%' AND table_name NOT LIKE 'recall\\_df\\_p%' "
            "AND table_name NOT LIKE 'recall\\_tf\\_p%' AND table_name <> 'recall_sizes'"))]

        async def columns(table: str) -> set[str]:
            rows = await hub.driver.read(lambda q: q.tx.all(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", table))
            return {r["column_name"] for r in rows}

    derived = set(DERIVED_TABLES)
    if not DIALECTS[hub.driver.dialect].recall_counters:
        derived -= {"recall_counts", "recall_counts_folded"}  # this store counts the result rows themselves
    assert set(tables) == set(TABLES) | set(HUB_TABLES) | derived, "a table is neither exported nor named hub-level or derived"
    links = {"entry": "entry_seq", "recall": "recall_seq"}
    for name, table in TABLES.items():
        carried = {links.get(c.name, c.name) for c in table.columns} | set(table.internal)
        assert carried == await columns(name), f"export of {name} is out of step with the schema"


def test_cli_moves_a_project_from_sqlite_to_postgres(tmp_path: Path) -> None:
    from tests.support.pg import fresh_database

    source = f"sqlite:///{tmp_path / 'source.db'}"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[3])}

    def relayroom(*args: str, url: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway", "--database-url", url, *args],
            env=env, input=stdin, capture_output=True, text=True, timeout=60,
        )

    assert relayroom("project", "create", "acme", url=source).returncode == 0
    token = relayroom("token", "create", "--project", "acme", "--level", "owner", "--name", "olivia", url=source).stdout.splitlines()[-1]
    out = tmp_path / "acme.jsonl"
    exported = relayroom("export", "--project", "acme", "--output", str(out), url=source)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["counts"]["token"] == 1
    missing = relayroom("export", "--project", "nope", url=source)
    assert missing.returncode == 1 and "nope" in missing.stderr.splitlines()[-1]

    with fresh_database() as target:
        imported = relayroom("import", "--input", str(out), url=target)
        assert imported.returncode == 0, imported.stderr
        assert json.loads(imported.stdout) == {"project": "acme", "imported": json.loads(exported.stdout)["counts"]}
        again = relayroom("import", "--input", str(out), url=target)
        assert again.returncode == 1 and "already exists" in again.stderr.splitlines()[-1]
        piped = relayroom("export", "--project", "acme", url=target)
        assert piped.returncode == 0 and piped.stdout.splitlines()[0].startswith('{"record":"header"')
        assert "Traceback" not in again.stderr + missing.stderr

    assert token.startswith("rr_")
