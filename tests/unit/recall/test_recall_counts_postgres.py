"""PostgreSQL's recall counts stay exact: every lexeme's rows per kind
(`recall_df_p<id>`), the project's rows and tokens (`recall_sizes`) and
every row's postings (`recall_tf_p<id>`), kept by the index's own writes,
equal a recount from the index table after
promotions, retirements, a second add of an indexed entry, expiry swept,
and promotions running at the same time in one project."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.core.clock import ManualClock
from gateway.hub import Hub
from gateway.knowledge.model import Principal
from gateway.store import search_postgres as sp
from tests.conftest import ProjectTokens

pytestmark_pg = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

STATEMENTS = [
    ("convention", "Run uv lock after editing pyproject.toml; don't edit uv.lock by hand."),
    ("pitfall", "The project's tests fail when the cache folder is shared between runs."),
    ("fact", "Deploy logs rotate at midnight and drop the last line."),
    ("decision", "We decided to run the tests in parallel with pytest-xdist."),
    ("convention", "Name migrations YYYYMMDD_description.sql and never edit one after release."),
    ("pitfall", "Deploy logs to stdout, not to a file: the container's disk fills up."),
]


async def _same_counts(hub: Hub, project_id: int) -> dict[tuple[str, str], int]:
    async def unit(q: Any) -> tuple[Any, Any]:
        kept = (await sp.counts(q.tx, project_id), await sp.postings(q.tx, project_id))
        return kept, (await sp.recount(q.tx, project_id), await sp.repostings(q.tx, project_id))

    kept, recounted = await hub.driver.read(unit)
    assert kept == recounted
    (df, (rows, _)), postings = kept
    assert len({seq for _, _, seq, *_ in postings}) == rows
    return df


async def _owner(hub: Hub) -> Principal:
    project = await hub.accounts.project("acme")
    return Principal(project=project, name="olivia", level="owner")


@pytestmark_pg
async def test_counts_follow_promotions_retirements_readds_and_expiry(hub: Hub, acme: ProjectTokens, clock: ManualClock) -> None:
    owner = await _owner(hub)
    project_id = owner.project.id
    ids = []
    for kind, statement in STATEMENTS:
        entry, _ = await hub.knowledge.learn(owner, kind, statement)
        await hub.knowledge.confirm(owner, entry.id)
        ids.append(entry.id)
    df = await _same_counts(hub, project_id)
    assert df[("log", "fact")] == 1 and df[("log", "pitfall")] == 1 and df[("convent", "convention")] == 2

    await hub.knowledge.retire(owner, ids[2], "stale")
    df = await _same_counts(hub, project_id)
    assert ("midnight", "fact") not in df  # its last row gone: the count too

    # A second add of an indexed entry counts it once.
    async def readd(q: Any) -> None:
        entry = await q.entry(project_id, ids[0])
        await q.index.add(entry)
        await q.index.add(entry)

    await hub.driver.write(readd)
    await _same_counts(hub, project_id)

    entry, _ = await hub.knowledge.learn(owner, "fact", "Nightly builds expire quickly.", expires_at=clock.now() + 60)
    await hub.knowledge.confirm(owner, entry.id)
    assert ("nightli", "fact") in await _same_counts(hub, project_id)
    clock.advance(120)
    assert await hub.sweep() >= 1
    assert ("nightli", "fact") not in await _same_counts(hub, project_id)


@pytestmark_pg
async def test_promotions_at_the_same_time_leave_the_counts_exact(hub: Hub, acme: ProjectTokens) -> None:
    owner = await _owner(hub)
    learned = []
    for n in range(12):
        kind, statement = STATEMENTS[n % len(STATEMENTS)]
        entry, _ = await hub.knowledge.learn(owner, kind, f"{statement} Case {n}.")
        learned.append(entry.id)
    await asyncio.gather(*(hub.knowledge.confirm(owner, i) for i in learned))
    df = await _same_counts(hub, owner.project.id)
    assert df[("case", "convention")] == 4
    await asyncio.gather(*(hub.knowledge.retire(owner, i, "done") for i in learned[::2]))
    df = await _same_counts(hub, owner.project.id)
    assert ("case", "convention") not in df and df[("case", "pitfall")] == 4  # the even ones went
