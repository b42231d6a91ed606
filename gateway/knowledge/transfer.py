"""Moving a project between hubs and backends: `relayroom export` / `import`.

The file is JSON Lines, one record per line, so it streams, diffs and greps
(`record` names what a line holds; the rest are the row's columns):

    {"record": "header", "format": "relayroom-project", "version": 1, "schema_version": 1,
     "project": "acme", "exported_at": "...", "from": "sqlite"}
    {"record": "project", "slug": "acme", "settings": {...}, "playbook": "...", "created_at": ...}
    {"record": "token", "principal": ..., "level": ..., "token_hash": ..., ...}
    {"record": "entry", "id": "kn_...", ..., "supports": [...], "contradictions": [...]}
    {"record": "proposal" | "thread_message" | "event" | "attestation" | "rate_limit_mark", ...}
    {"record": "recall", "id": "rc_...", ..., "results": [...], "uses": [...]}
    {"record": "audit", "at": ..., "action": ..., ...}
    {"record": "published_checkmap", "source": ..., "content": ..., "state": ..., ...}
    {"record": "end", "counts": {"entry": 12, ...}}

Every value is kept as stored: moments as epoch seconds (JSON floats round
trip exactly), JSON columns as the text the store held, ids and states as
they were.  Tokens move as their SHA-256 hashes, so the project's agents keep
working on the new hub; the file is therefore as sensitive as the database
(a hash cannot be used as a token, but treat the file like a backup).

Import happens in one write transaction into a hub where the project does not
exist yet; anything wrong (a truncated file, a field of the wrong type, an id
the hub already holds) refuses the whole file and writes nothing.  The
recall index is rebuilt from the trusted entries in the same transaction, and
on SQLite the recall counters from the recalls' results (derived data, never
in the file).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, TextIO

from gateway.knowledge import trust
from gateway.knowledge.settings import PRINCIPAL, PRINCIPAL_RULE, SETTING_RULES, SLUG, SLUG_RULE, setting_ok
from gateway.core.clock import Clock, to_rfc3339
from gateway.core.errors import Conflict, NotFound
from gateway.knowledge.model import LEVELS, Entry, ProjectSettings
from gateway.store.base import Driver
from gateway.store.queries.checkmaps import PUBLISHED_STATES
from gateway.store.queries import Queries
from gateway.store.schema import LATEST_VERSION
from gateway.store.transfer_sql import INT, REAL, TABLES, TEXT, Column, TransferQueries

FORMAT = "relayroom-project"
VERSION = 1

# Record type -> table.  Supports and contradictions travel inside their
# entry, results and uses inside their recall.
RECORDS = {
    "token": "tokens",
    "entry": "entries",
    "proposal": "proposals",
    "thread_message": "thread_messages",
    "event": "events",
    "attestation": "attestations",
    "recall": "recalls",
    "rate_limit_mark": "rate_limit_marks",
    "audit": "audit",
    "published_checkmap": "published_checkmaps",
}
NESTED = {"entry": {"supports": "supports", "contradictions": "contradictions"}, "recall": {"results": "recall_results", "uses": "recall_uses"}}
SETTINGS = ("k_distinct_issuers", "window_days", "playbook_min_trusted", "playbook_top_n", "demotions_per_hour")


class TransferError(ValueError):
    """A file this gateway cannot import; the message names the line."""


@dataclass
class Summary:
    project: str
    counts: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        parts = ", ".join(f"{n} {name}" for name, n in self.counts.items() if n)
        return f"project {self.project}: {parts or 'no rows'}"


# -- export -------------------------------------------------------------------------


async def export_project(driver: Driver, clock: Clock, slug: str) -> list[dict[str, Any]]:
    """Every record of one project, read on one consistent snapshot."""

    async def unit(q: Queries) -> dict[str, list[dict[str, Any]]]:
        project = await q.project_by_slug(slug)
        if project is None:
            raise NotFound(f"no project {slug!r}", code="project_not_found")
        transfer = TransferQueries(q)
        return {name: await transfer.rows(name, project.id) for name in TABLES}

    tables = await driver.read(unit)
    project_row = tables["projects"][0]
    records: list[dict[str, Any]] = [
        {
            "record": "header",
            "format": FORMAT,
            "version": VERSION,
            "schema_version": LATEST_VERSION,
            "project": slug,
            "exported_at": to_rfc3339(clock.now()),
            "from": driver.dialect,
        },
        {
            "record": "project",
            "slug": project_row["slug"],
            "created_at": project_row["created_at"],
            "settings": {name: project_row[name] for name in SETTINGS},
            "playbook": project_row["playbook"],
        },
    ]
    counts: dict[str, int] = {}
    for record_type, table_name in RECORDS.items():
        children = {
            key: _group(tables[child], "entry" if record_type == "entry" else "recall")
            for key, child in NESTED.get(record_type, {}).items()
        }
        for row in tables[table_name]:
            record = {"record": record_type, **_plain_row(table_name, row)}
            for key, grouped in children.items():
                record[key] = grouped.get(row["id"], [])
            records.append(record)
        counts[record_type] = len(tables[table_name])
    records.append({"record": "end", "counts": counts})
    return records


def _group(rows: list[dict[str, Any]], link: str) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row[link], []).append({k: v for k, v in row.items() if k != link})
    return grouped


def _plain_row(table_name: str, row: dict[str, Any]) -> dict[str, Any]:
    return {c.name: row[c.name] for c in TABLES[table_name].columns}


def write_jsonl(records: Iterable[dict[str, Any]], out: TextIO) -> None:
    for record in records:
        # ASCII only: the file survives any pipe or locale, and \u escapes
        # carry every character (a lone surrogate too) back exactly.
        out.write(json.dumps(record, separators=(",", ":")))
        out.write("\n")


# -- import -------------------------------------------------------------------------


@dataclass
class _Parsed:
    header: dict[str, Any]
    project: dict[str, Any]
    rows: dict[str, list[tuple[Any, ...]]]
    entries: list[dict[str, Any]]
    counts: dict[str, int]


def _check_value(column: Column, value: Any, where: str) -> Any:
    if value is None:
        if column.nullable:
            return None
        raise TransferError(f"{where}: {column.name} must not be null")
    if column.type == TEXT and isinstance(value, str):
        return value
    # A store column holds a 64-bit integer or a finite double: anything else
    # would fail inside the import's transaction (SQLite's OverflowError) or
    # be stored as a moment no page can print.
    if column.type == INT and isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63:
        return value
    if column.type == REAL and isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value):
        return float(value)
    raise TransferError(f"{where}: {column.name} must be {'a string' if column.type == TEXT else 'a number'}")


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _row_values(table_name: str, record: dict[str, Any], where: str, extra: tuple[str, ...] = ()) -> tuple[Any, ...]:
    columns = TABLES[table_name].columns
    names = {c.name for c in columns}
    unknown = set(record) - names - set(extra) - {"record"}
    if unknown:
        raise TransferError(f"{where}: unknown field {sorted(unknown)[0]!r} (a file from a newer gateway?)")
    missing = [c.name for c in columns if c.name not in record]
    if missing:
        raise TransferError(f"{where}: missing field {missing[0]!r}")
    return tuple(_check_value(c, record[c.name], where) for c in columns)


def parse(lines: Iterable[str]) -> _Parsed:
    """Read and check a whole export file before anything is written."""
    header: dict[str, Any] | None = None
    project: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}
    entries: list[dict[str, Any]] = []
    counts = {name: 0 for name in RECORDS}
    for number, raw in enumerate(lines, start=1):
        where = f"line {number}"
        if not raw.strip():
            continue
        if end is not None:
            raise TransferError(f"{where}: data after the end record")
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TransferError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("record"), str):
            raise TransferError(f"{where}: each line must be a JSON object with a \"record\" type")
        kind = record["record"]
        if header is None:
            if kind != "header" or record.get("format") != FORMAT:
                raise TransferError(f"{where}: not a RelayRoom project export (no {FORMAT} header)")
            if record.get("version") != VERSION:
                raise TransferError(f"{where}: export format version {record.get('version')!r}; this gateway reads {VERSION}")
            schema = record.get("schema_version")
            if not isinstance(schema, int) or schema > LATEST_VERSION:
                raise TransferError(f"{where}: exported from schema {schema!r}, newer than this gateway's {LATEST_VERSION}; upgrade first")
            header = record
        elif kind == "project":
            if project is not None:
                raise TransferError(f"{where}: a second project record (one project per file)")
            project = _parse_project(record, where)
            if project["slug"] != header.get("project"):
                raise TransferError(f"{where}: the project record names {project['slug']!r}, the header {header.get('project')!r}")
        elif kind == "end":
            end = record
        elif kind in RECORDS:
            if project is None:
                raise TransferError(f"{where}: a {kind} record before the project record")
            table_name = RECORDS[kind]
            nested = NESTED.get(kind, {})
            values = _row_values(table_name, record, where, extra=tuple(nested))
            _check_meaning(kind, record, where)
            rows[table_name].append(values)
            counts[kind] += 1
            link = "entry" if kind == "entry" else "recall"
            for key, child in nested.items():
                items = record.get(key, [])
                if not isinstance(items, list):
                    raise TransferError(f"{where}: {key} must be a list")
                for item in items:
                    if not isinstance(item, dict):
                        raise TransferError(f"{where}: each of {key} must be an object")
                    rows[child].append(_row_values(child, {**item, link: record["id"]}, f"{where} ({key})"))
            if kind == "entry":
                entries.append({c.name: v for c, v in zip(TABLES["entries"].columns, values)})
        else:
            raise TransferError(f"{where}: unknown record type {kind!r}")
    if header is None:
        raise TransferError("the file is empty: no export header")
    if project is None:
        raise TransferError("the file has no project record")
    if end is None:
        raise TransferError("the file ends before its end record: it was cut short")
    known_entries = {values["id"] for values in entries}
    entry_position = {name: [c.name for c in TABLES[name].columns].index("entry") for name in ("recall_results", "recall_uses")}
    for name, position in entry_position.items():
        for values in rows[name]:
            if values[position] not in known_entries:
                raise TransferError(f"a recall names entry {values[position]!r}, which the file does not hold")
    declared = end.get("counts")
    if not isinstance(declared, dict) or any(declared.get(k, 0) != n for k, n in counts.items()):
        raise TransferError(f"the end record's counts {declared!r} do not match the file ({counts}): it was altered or cut")
    return _Parsed(header, project, rows, entries, counts)


def _parse_project(record: dict[str, Any], where: str) -> dict[str, Any]:
    slug = record.get("slug")
    if not isinstance(slug, str) or not SLUG.fullmatch(slug):
        raise TransferError(f"{where}: project slug must be {SLUG_RULE}")
    settings = record.get("settings")
    if not isinstance(settings, dict) or set(settings) != set(SETTINGS):
        raise TransferError(f"{where}: settings must hold exactly {', '.join(SETTINGS)}")
    for name in SETTINGS:
        # The ranges of docs/security.md, Limits, as PATCH settings holds them: an export of
        # an older gateway may carry a value that was accepted then.
        if not setting_ok(name, settings[name]):
            raise TransferError(f"{where}: settings.{name} must be {SETTING_RULES[name][3]} (found {settings[name]!r})")
    created_at = record.get("created_at")
    if isinstance(created_at, bool) or not isinstance(created_at, (int, float)) or not _finite(created_at):
        raise TransferError(f"{where}: created_at must be a number")
    playbook = record.get("playbook")
    if not isinstance(playbook, str):
        raise TransferError(f"{where}: playbook must be a string")
    return {"slug": slug, "settings": settings, "created_at": float(created_at), "playbook": playbook}


def _check_meaning(kind: str, record: dict[str, Any], where: str) -> None:
    if kind == "entry":
        if record["kind"] not in trust.KINDS:
            raise TransferError(f"{where}: kind {record['kind']!r} is not one of {', '.join(trust.KINDS)}")
        if record["state"] not in trust.STATES:
            raise TransferError(f"{where}: state {record['state']!r} is not one of {', '.join(trust.STATES)}")
    elif kind == "published_checkmap":
        if record["state"] not in PUBLISHED_STATES:
            raise TransferError(f"{where}: state {record['state']!r} is not one of {', '.join(PUBLISHED_STATES)}")
    elif kind == "token":
        if record["level"] not in LEVELS:
            raise TransferError(f"{where}: level {record['level']!r} is not one of {', '.join(LEVELS)}")
        if not PRINCIPAL.fullmatch(record["principal"]):
            raise TransferError(f"{where}: principal {record['principal']!r} must be {PRINCIPAL_RULE}")


async def import_project(driver: Driver, lines: Iterable[str]) -> Summary:
    parsed = parse(lines)
    slug = parsed.project["slug"]
    settings = ProjectSettings(
        k_distinct_issuers=int(parsed.project["settings"]["k_distinct_issuers"]),
        window_days=float(parsed.project["settings"]["window_days"]),
        playbook_min_trusted=int(parsed.project["settings"]["playbook_min_trusted"]),
        playbook_top_n=int(parsed.project["settings"]["playbook_top_n"]),
        demotions_per_hour=int(parsed.project["settings"]["demotions_per_hour"]),
    )

    async def unit(q: Queries) -> None:
        if await q.project_by_slug(slug) is not None:
            raise Conflict(
                f"project {slug!r} already exists on this hub; import only into a hub without it", code="project_exists"
            )
        transfer = TransferQueries(q)
        await _refuse_known_ids(transfer, parsed)
        project = await q.insert_project(slug, settings, parsed.project["created_at"], parsed.project["playbook"])
        await transfer.insert("tokens", project.id, parsed.rows["tokens"], {})
        await transfer.insert("entries", project.id, parsed.rows["entries"], {})
        entry_seqs = await transfer.entry_seqs(project.id)
        entry_links = {"entry": entry_seqs}
        for table_name in ("supports", "contradictions", "proposals", "thread_messages", "events", "attestations", "recalls"):
            await transfer.insert(table_name, project.id, parsed.rows[table_name], entry_links)
        links = {"entry": entry_seqs, "recall": await transfer.recall_seqs(project.id)}
        for table_name in ("recall_results", "recall_uses", "rate_limit_marks", "audit", "published_checkmaps"):
            await transfer.insert(table_name, project.id, parsed.rows[table_name], links)
        if parsed.rows["published_checkmaps"]:
            await q.new_checkmap_generation()  # the serving gateways load the project's published map
        await q.fold_returned()  # the recall counters, where the store keeps them
        for values in parsed.entries:
            if values["state"] == "trusted":
                await q.index.add(_indexable(values, entry_seqs[values["id"]], project.id, slug))
                await q.track_vector(entry_seqs[values["id"]], project.id)

    await driver.write(unit)
    return Summary(slug, dict(parsed.counts))


async def _refuse_known_ids(transfer: TransferQueries, parsed: _Parsed) -> None:
    """An id the hub already holds means this project (or a copy) was
    imported here before: refuse with that, rather than a key violation."""
    for table_name in ("entries", "proposals", "thread_messages", "events", "attestations", "recalls"):
        position = [c.name for c in TABLES[table_name].columns].index("id")
        ids = [row[position] for row in parsed.rows[table_name]]
        if len(set(ids)) != len(ids):
            raise TransferError(f"the file holds the same {table_name} id twice")
        known = await transfer.existing_ids(table_name, ids)
        if known:
            raise Conflict(
                f"this hub already holds {table_name} {known[0]!r}: the project was imported here before", code="ids_exist"
            )
    position = [c.name for c in TABLES["tokens"].columns].index("token_hash")
    if await transfer.existing_token_hashes([row[position] for row in parsed.rows["tokens"]]):
        raise Conflict("this hub already holds one of the file's tokens: the project was imported here before", code="ids_exist")


def _indexable(values: dict[str, Any], seq: int, project_id: int, slug: str) -> Entry:
    return Entry(
        seq=seq,
        id=values["id"],
        project_id=project_id,
        project_slug=slug,
        kind=values["kind"],
        statement=values["statement"],
        evidence=values["evidence"],
        state=values["state"],
        created_at=values["created_at"],
        created_by=values["created_by"],
        created_via=values["created_via"],
        expires_at=values["expires_at"],
        promoted_at=values["promoted_at"],
        promoted_by=values["promoted_by"],
    )
