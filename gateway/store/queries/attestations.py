"""CI attestations: replay and delivery stores, key refresh slots, listings and per-check summaries."""

from __future__ import annotations

from typing import Any

from gateway.store.queries.common import QueryBase, _dump, _load, _where


class AttestationQueries(QueryBase):
    async def reserve_jti(self, issuer: str, jti: str, expires_at: float, now: float) -> bool:
        """True if this (issuer, jti) was never seen while it could be accepted."""
        # One statement: a new key is inserted, an expired one taken over;
        # a live one changes nothing (0 rows), also when two processes race.
        return bool(
            await self.tx.run(
                "INSERT INTO seen_tokens (issuer, jti, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (issuer, jti) DO UPDATE SET expires_at = excluded.expires_at "
                "WHERE seen_tokens.expires_at <= ?",
                issuer,
                jti,
                expires_at,
                now,
            )
        )

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

    async def reserve_delivery(self, source: str, key: str, now: float) -> bool:
        return bool(
            await self.tx.run(
                "INSERT INTO webhook_deliveries (source, delivery_key, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                source,
                key,
                now,
            )
        )

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

    async def list_attestations(
        self, project_id: int, *, check: str | None = None, before_seq: int | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Newest first: what CI said, counted or not."""
        where, args = _where(("project_id = ?", project_id), ("check_name = ?", check), ("seq < ?", before_seq))
        rows = await self.tx.all(
            "SELECT seq, id, issuer, check_name, outcome, counted, reason, provenance, run_url, at FROM attestations "
            f"WHERE {where} ORDER BY seq DESC LIMIT ?",
            *args,
            limit,
        )
        for row in rows:
            row["counted"] = bool(row["counted"])
            row["provenance"] = _load(row["provenance"])
        return rows

    async def check_summary(self, project_id: int) -> list[dict[str, Any]]:
        """Per check and issuer: how many attestations, how many counted, the last one."""
        return await self.tx.all(
            "SELECT check_name, issuer, COUNT(*) AS attestations, SUM(counted) AS counted, MAX(at) AS last_at "
            "FROM attestations WHERE project_id = ? GROUP BY check_name, issuer ORDER BY check_name, issuer",
            project_id,
        )

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
