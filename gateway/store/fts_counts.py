"""How many rows each query phrase matches in a project's FTS5 index, kept
between searches.

Why: in a big project a search decides which phrases to set aside
(`gateway.recall.search.prune`) from how many rows each one matches, and
counting them took one FTS5 statement per phrase (plus one for the whole
question): about a third of a 10k-entry recall.  Agents' questions share
their words, so the counts are kept per process, per index table, and
asked for again only for a phrase not seen since the index last changed.

When the index changed: FTS5 rewrites its structure record (row 10 of the
table's `_data` shadow table) on every committed change, a write counter in
it included, so the record as bytes is the index's version.  One primary-key
read per search checks it; a new version drops the table's counts.  Only a
read-only snapshot may use the cache (`SqliteDriver.read`): inside a write
transaction FTS5 holds changes not yet in that record.

The table's row count is kept with its version too: a project of no more
rows than a search wants is ranked in one statement without counting.
A phrase's count is capped by the caller: only "at most this many, or more"
is ever needed.

A small table's whole index is kept with its version too, when recall asks
for it (`held`, `gateway.store.fts_memory`), and the stemmer that cuts
questions as the index cuts text (`stems`).

A big table's index is held too, as arrays loaded on a worker thread
(`arrays`, `gateway.store.fts_arrays`), labelled with the version it was
read at: a search uses it only while the table still has that version.

So are the entries recall has returned from the table (`entries`): reading
ten entries with their supports and contradictions was three statements
and about a tenth of a small project's recall.  Everything a recall shows of
a trusted entry changes with its index row: a promotion adds the row, a
demotion, retirement or expiry removes it, and the two changes that leave
the indexed text as it was (a new expiry, a new support) write the row
again (`SqliteFtsIndex.rewrite`), so a kept entry is never staler than its
version.  A small table's entries are kept as the very objects recall
returned (their answers' JSON is kept with them, `Entry.to_json`); a big
table's, whose recalls return ever new entries, are kept packed
(`gateway.store.packed_entries`: the garbage collector does not walk them)
and unpacked afresh for each recall.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from gateway.knowledge.model import Entry
from gateway.store.fts_arrays import ArrayTables
from gateway.store.fts_memory import HELD_INSTANCES, HeldTable, Stems, load
from gateway.store.packed_entries import Packed, pack, packed_size, unpack

if TYPE_CHECKING:
    from gateway.store.bm25_arrays import ArrayTable

MAX_TABLES = 256
MAX_PHRASES_PER_TABLE = 50_000
MAX_KEPT_ENTRIES = 5_000  # over all tables of a process: a few kB each, so at most some 15 MB
MAX_PACKED_BYTES = 16 << 20  # big tables' entries, packed, over all tables (`packed_entries.packed_size`)

Key = tuple[str | None, str, bool]  # (kind filter, phrase text, prefix)


class TableCounts:
    """What is known of one version of one index table."""

    def __init__(self, version: bytes) -> None:
        self.version = version
        self.rows = 0  # the rows the table holds
        self.phrases: dict[Key, int] = {}
        self.held: HeldTable | None = None
        self.entries: dict[int, Entry] = {}  # by seq: the entries recall returned from this version
        self.packed: dict[int, Packed] = {}  # the same, of a big table, packed
        self.packed_bytes = 0  # what `packed` holds (`packed_size`)

    async def counts(self, keys: list[Key], count: Callable[[Key], Awaitable[int]]) -> dict[Key, int]:
        """Each key's count, `count`ed only if not counted before."""
        out: dict[Key, int] = {}
        for key in keys:
            n = self.phrases.get(key)
            if n is None:
                n = await count(key)
                if len(self.phrases) >= MAX_PHRASES_PER_TABLE:
                    self.phrases.clear()
                self.phrases[key] = n
            out[key] = n
        return out


class PhraseCounts:
    """Per table, its `TableCounts`.  Owned by one driver, used from its event loop only."""

    def __init__(self, path: str | None = None) -> None:
        self._tables: dict[str, TableCounts] = {}
        self.stems = Stems()
        self.array_tables = ArrayTables(path)  # `path`: the database file, for the loads' own connections
        self._held_instances = 0  # token instances of the held tables, all together
        self._kept_entries = 0  # entries kept by all tables together
        self._packed_bytes = 0  # what the entries kept packed by all tables hold together

    async def table(self, tx: Any, table: str) -> TableCounts:
        """The table's counts, started afresh if the index changed since."""
        row = await tx.one(f"SELECT block FROM {table}_data WHERE id = 10")
        version = bytes(row["block"]) if row and row["block"] is not None else b""
        known = self._tables.get(table)
        if known is None or known.version != version:
            if known is not None and known.held is not None:
                self._held_instances -= known.held.instances
            if known is not None:
                self._kept_entries -= len(known.entries)
                self._packed_bytes -= known.packed_bytes
            if len(self._tables) >= MAX_TABLES:
                self._drop_held()
                self._drop_entries()
                self._drop_packed()
                self._tables.clear()
            known = TableCounts(version)
            size = await tx.one(f"SELECT COUNT(*) AS n FROM {table}_docsize")
            known.rows = int(size["n"]) if size else 0
            self._tables[table] = known
        return known

    async def held(self, tx: Any, table: str, known: TableCounts) -> HeldTable:
        """`known`'s table as its index holds it, loaded in `tx`'s snapshot
        (the one `known` was read in) if not held yet."""
        if known.held is None:
            held = await load(tx, table)
            if self._held_instances + held.instances > HELD_INSTANCES:
                self._drop_held()
            known.held = held
            self._held_instances += held.instances
        return known.held

    def arrays(self, table: str, known: TableCounts) -> ArrayTable | None:
        """`known`'s table as arrays, if a copy of its version is held (else
        one is loaded in the background, and FTS5 ranks meanwhile)."""
        return self.array_tables.get(table, known.version, known.rows)

    async def close(self) -> None:
        await self.array_tables.close()

    async def entries(
        self, known: TableCounts, seqs: list[int], fetch: Callable[[list[int]], Awaitable[dict[int, Entry]]],
        *, packed: bool = False,
    ) -> dict[int, Entry]:
        """The entries of `seqs` that `known`'s version holds: kept ones as
        they are, the others `fetch`ed (in the snapshot `known` was read in)
        and kept.  Callers read them, never change them.  `packed`: kept
        packed instead, each recall given fresh objects (a big table)."""
        if packed:
            return await self._packed(known, seqs, fetch)
        kept = known.entries
        found = {seq: kept[seq] for seq in seqs if seq in kept}
        missing = [seq for seq in seqs if seq not in kept]
        if missing:
            fetched = await fetch(missing)
            found.update(fetched)  # before a drop below can take the kept ones away
            if self._kept_entries + len(fetched) > MAX_KEPT_ENTRIES:
                self._drop_entries()
            known.entries.update(fetched)
            self._kept_entries += len(fetched)
        return found

    async def _packed(
        self, known: TableCounts, seqs: list[int], fetch: Callable[[list[int]], Awaitable[dict[int, Entry]]]
    ) -> dict[int, Entry]:
        kept = known.packed
        found = {seq: unpack(kept[seq]) for seq in seqs if seq in kept}
        missing = [seq for seq in seqs if seq not in kept]
        if missing:
            fetched = await fetch(missing)
            found.update(fetched)
            packed = {seq: pack(entry) for seq, entry in fetched.items()}
            added = sum(packed_size(p) for p in packed.values())
            if self._packed_bytes + added > MAX_PACKED_BYTES:
                self._drop_packed()
            known.packed.update(packed)
            known.packed_bytes += added
            self._packed_bytes += added
        return found

    def _drop_held(self) -> None:
        for known in self._tables.values():
            known.held = None
        self._held_instances = 0

    def _drop_entries(self) -> None:
        for known in self._tables.values():
            known.entries = {}
        self._kept_entries = 0

    def _drop_packed(self) -> None:
        for known in self._tables.values():
            known.packed = {}
            known.packed_bytes = 0
        self._packed_bytes = 0
