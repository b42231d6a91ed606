"""A big project's kept entries are packed (gateway.store.packed_entries):
unpacked they equal what was read, fresh objects each time, and the
garbage collector stops walking them once it has seen them."""

from __future__ import annotations

import gc
import json

from gateway.knowledge.model import ContradictionRecord, Entry, Support
from gateway.store.packed_entries import pack, unpack


def _entry(**changes: object) -> Entry:
    fields: dict = dict(
        seq=7, id="en_1", project_id=3, project_slug="acme", kind="pitfall", statement="Never run the migrations twice.",
        evidence="docs/db.md", state="trusted", created_at=1.5, created_by="agent-1", created_via="mcp",
        expires_at=9e9, promoted_at=2.5, promoted_by="owner:ada",
        provenance={"thread_id": "t-1", "nested": {"n": [1, 2.5, None, True]}, "big": 2**70, "odd": float("inf")},
    )
    fields.update(changes)
    entry = Entry(**fields)  # type: ignore[arg-type]
    entry.supports += [Support("oidc:ci", "check-a", "at_1", 3.0), Support("github:1", "check-b", None, 4.0)]
    entry.contradictions.append(ContradictionRecord("agent-2", {"why": "it failed", "lines": [1, 2]}, 5.0, 6.0))
    return entry


def test_an_entry_unpacks_equal_to_what_was_packed_as_fresh_objects() -> None:
    entry = _entry()
    packed = pack(entry)
    first, second = unpack(packed), unpack(packed)
    assert first == entry and second == entry
    assert first.to_json(0.0) == entry.to_json(0.0)
    # Fresh each time: a caller changing what it got cannot change what is kept.
    assert first is not second and first.provenance is not second.provenance
    first.supports.clear()
    first.provenance["thread_id"] = "changed"  # type: ignore[index]
    assert unpack(packed) == entry


def test_an_entry_with_nothing_optional_unpacks_equal() -> None:
    bare = Entry(seq=1, id="en_2", project_id=1, project_slug="p", kind="fact", statement="s", evidence=None,
                 state="trusted", created_at=1.0, created_by="a", created_via="rest", expires_at=None,
                 promoted_at=None, promoted_by=None)
    assert unpack(pack(bare)) == bare


def test_json_values_unpack_as_the_store_read_them() -> None:
    # What json.loads gave (a NaN, an integer past 64 bits) comes back the same.
    detail = json.loads('{"n": NaN, "big": 123456789012345678901234567890}')
    entry = _entry(provenance=None)
    entry.contradictions[0] = ContradictionRecord("agent-2", detail, 5.0, 6.0)
    back = unpack(pack(entry)).contradictions[0].detail
    assert back["big"] == detail["big"] and back["n"] != back["n"]


def test_the_collector_stops_walking_a_packed_entry() -> None:
    packed = pack(_entry())
    # A tuple is untracked by the pass after the tuples inside it are: a
    # support's tuple, then the supports', then the entry's.
    for _ in range(3):
        gc.collect()
    assert not gc.is_tracked(packed)
    assert all(not gc.is_tracked(part) for part in packed if isinstance(part, tuple))


def _held_bytes(value: object) -> int:
    import sys

    size = sys.getsizeof(value)
    if isinstance(value, tuple):
        size += sum(_held_bytes(part) for part in value)
    return size


def test_the_size_a_bound_counts_is_about_what_a_packed_entry_holds() -> None:
    from gateway.store.packed_entries import packed_size

    short = _entry(provenance=None, evidence=None, statement="Run make lint first.")
    short.supports.clear()
    short.contradictions.clear()
    for entry in (short, _entry(), _entry(statement="s" * 2000, evidence="e" * 8000)):
        packed = pack(entry)
        assert 0.5 <= packed_size(packed) / _held_bytes(packed) <= 1.5
