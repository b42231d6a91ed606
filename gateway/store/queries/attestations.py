"""CI attestations: replay and delivery stores, key refresh slots, listings and per-check summaries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.store.queries.common import QueryBase, _dump


@dataclass(frozen=True)
class Replay:
    """The key that lets an attestation be recorded once: a token's `jti`
    (`token=True`; held until `until`, then it could no longer be accepted)
    or a delivery key (a signed run attempt, a `webhook-id`; kept)."""

    token: bool
    source: str  # the issuer URL of a token, the identity a delivery came through
    key: str
    until: float = 0.0


@dataclass(frozen=True)
class Recorded:
    """What `record_rerun` found.  Nothing was written unless `recorded`."""

    project_id: int | None  # None: no project of that slug
    missing: int  # mapped entries this fingerprint does not support yet (the full unit must add them)
    recorded: bool  # the replay key was new and the attestation row is written


# PostgreSQL: the whole rerun in one statement, run as its own transaction
# (no BEGIN/COMMIT round trips).  The reservation writes only when the
# project exists and every mapped entry already holds this fingerprint's
# support; the attestation row only when the reservation took.  {reserve}
# is the replay store's INSERT over the `go` row.
_RERUN_PG = """WITH p AS (SELECT id FROM projects WHERE slug = ?),
need AS (SELECT COUNT(*) AS missing FROM unnest(?::text[]) AS want(entry_id) WHERE NOT EXISTS (
    SELECT 1 FROM supports s JOIN entries e ON e.seq = s.entry_seq
    WHERE e.project_id = (SELECT id FROM p) AND e.id = want.entry_id AND s.issuer = ? AND s.source = ?)),
go AS (SELECT p.id FROM p, need WHERE need.missing = 0),
r AS ({reserve} RETURNING 1),
a AS (INSERT INTO attestations (id, project_id, issuer, check_name, outcome, counted, reason, provenance, run_url, at)
    SELECT ?, go.id, ?, ?, ?, ?::bigint, ?, ?, ?, ?::double precision FROM go, r RETURNING 1)
SELECT (SELECT id FROM p) AS project_id, (SELECT missing FROM need) AS missing, (SELECT COUNT(*) FROM a) AS recorded"""
RERUN_TOKEN_PG = _RERUN_PG.format(reserve=(
    "INSERT INTO seen_tokens (issuer, jti, expires_at) SELECT ?, ?, ?::double precision FROM go "
    "ON CONFLICT (issuer, jti) DO UPDATE SET expires_at = excluded.expires_at "
    "WHERE seen_tokens.expires_at <= ?::double precision"))
RERUN_DELIVERY_PG = _RERUN_PG.format(reserve=(
    "INSERT INTO webhook_deliveries (source, delivery_key, at) SELECT ?, ?, ?::double precision FROM go "
    "ON CONFLICT DO NOTHING"))


class AttestationQueries(QueryBase):
    async def reserve(self, replay: Replay, now: float) -> bool:
        """True if the replay key was not taken: reserved now.  One
        statement: a new key is inserted, a token's expired one taken over;
        a key taken changes nothing (0 rows), also when two processes race."""
        if replay.token:
            return bool(await self.tx.run(
                "INSERT INTO seen_tokens (issuer, jti, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (issuer, jti) DO UPDATE SET expires_at = excluded.expires_at "
                "WHERE seen_tokens.expires_at <= ?",
                replay.source, replay.key, replay.until, now,
            ))
        return bool(await self.tx.run(
            "INSERT INTO webhook_deliveries (source, delivery_key, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            replay.source, replay.key, now,
        ))

    async def record_rerun(
        self,
        slug: str,
        replay: Replay,
        supports: tuple[str, ...],
        attestation_id: str,
        issuer: str,
        check: str,
        outcome: str,
        reason: str | None,
        provenance: Any,
        run_url: str | None,
        now: float,
    ) -> Recorded:
        """Record an attestation whose every mapped entry (`supports`, empty
        when it does not count) already holds this issuer + check's support:
        reserve the replay key and write the row, nothing else.  Writes
        nothing when the project is missing, a support is missing (the
        caller runs the full unit) or the key was taken.  On PostgreSQL one
        statement (see `Driver`'s `write_statement`)."""
        counted = 1 if reason is None else 0
        if self.dialect.array_params:
            reserve = ((replay.source, replay.key, replay.until, now) if replay.token
                       else (replay.source, replay.key, now))
            row = await self.tx.one(
                RERUN_TOKEN_PG if replay.token else RERUN_DELIVERY_PG,
                slug, list(supports), issuer, check, *reserve,
                attestation_id, issuer, check, outcome, counted, reason, _dump(provenance), run_url, now,
            )
            assert row is not None
            return Recorded(row["project_id"], int(row["missing"]), bool(row["recorded"]))
        marks = ", ".join("?" * len(supports)) or "NULL"
        row = await self.tx.one(
            "SELECT p.id AS project_id, (SELECT COUNT(DISTINCT e.id) FROM supports s JOIN entries e ON e.seq = s.entry_seq "
            f"WHERE e.project_id = p.id AND e.id IN ({marks}) AND s.issuer = ? AND s.source = ?) AS found "
            "FROM projects p WHERE p.slug = ?",
            *supports, issuer, check, slug,
        )
        if row is None:
            return Recorded(None, len(supports), False)
        missing = len(set(supports)) - int(row["found"])
        if missing or not await self.reserve(replay, now):
            return Recorded(row["project_id"], missing, False)
        await self.insert_attestation(attestation_id, row["project_id"], issuer, check, outcome, reason is None,
                                      reason, provenance, run_url, now)
        return Recorded(row["project_id"], 0, True)

    async def prune_replay_records(self, now: float, webhook_id_before: float) -> int:
        """Forget what can no longer be replayed: tokens past their
        acceptance window, and Standard Webhooks ids older than the timestamp
        tolerance (a replay that old is refused as stale anyway).  GitHub's
        run keys are kept: its deliveries carry no signed timestamp."""
        tokens = await self.tx.run("DELETE FROM seen_tokens WHERE expires_at <= ?", now)
        ids = await self.tx.run(
            "DELETE FROM webhook_deliveries WHERE delivery_key LIKE 'webhook-id:%' AND at < ?", webhook_id_before
        )
        return tokens + ids

    async def insert_attestation(
        self,
        attestation_id: str,
        project_id: int,
        issuer: str,
        check: str,
        outcome: str,
        counted: bool,
        reason: str | None,
        provenance: Any,
        run_url: str | None,
        now: float,
    ) -> None:
        await self.tx.run(
            "INSERT INTO attestations (id, project_id, issuer, check_name, outcome, counted, reason, provenance, run_url, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            attestation_id,
            project_id,
            issuer,
            check,
            outcome,
            1 if counted else 0,
            reason,
            _dump(provenance),
            run_url,
            now,
        )

    async def claim_jwks_refresh(self, issuer: str, now: float, cooldown: float) -> bool:
        """Take this issuer's JWKS refresh slot if no process took it in the
        last `cooldown` seconds: one refresh per issuer per cooldown for the
        whole gateway, across processes."""
        await self.tx.run("INSERT INTO jwks_refreshes (issuer, at) VALUES (?, ?) ON CONFLICT DO NOTHING", issuer, -1.0)
        return bool(
            await self.tx.run(
                "UPDATE jwks_refreshes SET at = ? WHERE issuer = ? AND at <= ?", now, issuer, now - cooldown
            )
        )

    async def jwks_refreshed_at(self, issuer: str) -> float | None:
        row = await self.tx.one("SELECT at FROM jwks_refreshes WHERE issuer = ?", issuer)
        return float(row["at"]) if row and row["at"] >= 0 else None

    async def check_outcomes(self, project_id: int) -> list[dict[str, Any]]:
        """Attestations grouped by check, issuer, outcome and whether they counted."""
        return await self.tx.all(
            "SELECT check_name, issuer, outcome, counted, COUNT(*) AS n, MAX(at) AS last_at FROM attestations "
            "WHERE project_id = ? GROUP BY check_name, issuer, outcome, counted ORDER BY check_name, issuer",
            project_id,
        )

    async def latest_check_reasons(self, project_id: int) -> dict[str, str | None]:
        """Each check's most recent `reason` (None when its latest attestation counted)."""
        rows = await self.tx.all(
            "SELECT a.check_name, a.reason FROM attestations a JOIN ("
            "SELECT check_name, MAX(seq) AS seq FROM attestations WHERE project_id = ? GROUP BY check_name"
            ") latest ON latest.seq = a.seq",
            project_id,
        )
        return {r["check_name"]: r["reason"] for r in rows}

    async def recent_attestations(self, project_id: int, per_check: int = 5) -> list[dict[str, Any]]:
        """The latest `per_check` attestations of each check, newest first
        within a check (the Checks page links each to its run)."""
        rows = await self.tx.all(
            "SELECT id, issuer, check_name, outcome, counted, reason, run_url, at FROM ("
            "SELECT id, issuer, check_name, outcome, counted, reason, run_url, at, seq, "
            "ROW_NUMBER() OVER (PARTITION BY check_name ORDER BY seq DESC) AS rank_in_check "
            "FROM attestations WHERE project_id = ?) ranked WHERE rank_in_check <= ? ORDER BY check_name, seq DESC",
            project_id,
            per_check,
        )
        for row in rows:
            row["counted"] = bool(row["counted"])
        return rows
