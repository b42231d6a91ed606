"""Entries kept between recalls as tuples of plain values.

Why: a big project's recalls return ever new entries, and keeping them as
`Entry` objects (each with its lists, supports and dicts) made the garbage
collector walk tens of thousands of objects at every full pass: a
10k-entry project's p99 rose by milliseconds.  A tuple that holds only
strings, numbers, None and such tuples is left out of the collector's
walks once it has been seen (CPython untracks it, one level of tuples a
pass), so a packed entry is walked a few times at most, and unpacking ten
of them costs a recall a few microseconds where reading them again (three
statements) cost some sixty.

The JSON values an entry carries (its provenance, a contradiction's
detail) are packed as their JSON text, with the standard library's `json`
that read them from the store, so they unpack to equal values; each unpack
builds fresh objects, so no caller can change what is kept.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.knowledge.model import ContradictionRecord, Entry, Support

Packed = tuple[Any, ...]
# What a packed entry holds besides its texts, in bytes (sys.getsizeof of
# the tuples, strings and numbers of a measured one): for the bound on them.
OVERHEAD = 900
PER_SUPPORT = 300


def _text(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _value(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def pack(entry: Entry) -> Packed:
    return (
        entry.seq, entry.id, entry.project_id, entry.project_slug, entry.kind, entry.statement, entry.evidence,
        entry.state, entry.created_at, entry.created_by, entry.created_via, entry.expires_at, entry.promoted_at,
        entry.promoted_by, _text(entry.provenance),
        tuple((s.issuer, s.source, s.attestation_id, s.at) for s in entry.supports),
        tuple((c.by, _text(c.detail), c.at, c.until) for c in entry.contradictions),
    )


def packed_size(packed: Packed) -> int:
    """About the bytes `packed` holds (its texts as characters, the rest as
    `OVERHEAD`): what a bound on kept entries counts."""
    (_, _, _, _, _, statement, evidence, _, _, _, _, _, _, _, provenance, supports, contradictions) = packed
    texts = (statement, evidence, provenance, *(detail for _, detail, _, _ in contradictions))
    return OVERHEAD + sum(len(t) for t in texts if t is not None) + PER_SUPPORT * len(supports)


def unpack(packed: Packed) -> Entry:
    (seq, id_, project_id, project_slug, kind, statement, evidence, state, created_at, created_by, created_via,
     expires_at, promoted_at, promoted_by, provenance, supports, contradictions) = packed
    entry = Entry(
        seq=seq, id=id_, project_id=project_id, project_slug=project_slug, kind=kind, statement=statement,
        evidence=evidence, state=state, created_at=created_at, created_by=created_by, created_via=created_via,
        expires_at=expires_at, promoted_at=promoted_at, promoted_by=promoted_by, provenance=_value(provenance),
    )
    if supports:
        entry.supports.extend(Support(issuer, source, attestation_id, at) for issuer, source, attestation_id, at in supports)
    if contradictions:
        entry.contradictions.extend(
            ContradictionRecord(by, _value(detail), at, until) for by, detail, at, until in contradictions
        )
    return entry
