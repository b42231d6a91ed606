"""Every SQL statement of the gateway, written once for both backends.

`Queries` wraps one transaction (`Tx`).  Placeholders are `?`; the PostgreSQL
driver rewrites them.  JSON columns are TEXT holding JSON, moments are epoch
floats.  Full-text search differs by dialect and lives in `search_index`.

The statements are grouped by domain, one module each, so a domain's SQL
reads on one page; `Queries` is all of them on one transaction, the one object
the services and the drivers know:

    common        row shapes, effective-state filters, QueryBase (tx, locks)
    meta          the meta table, row counts
    projects      projects, settings, playbook text, tokens
    sessions      dashboard sessions
    entries       entries with their supports and contradictions
    supports      supports, contradictions, the demotion count
    audit         the audit trail
    budgets       events, per-principal budgets, rate-limit marks
    recalls       search, recall records, reported uses
    attestations  CI attestations, replay and delivery stores, JWKS slots
    checkmaps     check maps published by the repositories, and their generation
    proposals     the owner's proposals queue
    threads       thread messages and their budget
    learning      use and recall statistics for the playbook and learning report
    vectors       recall's embedding vectors, one row per trusted entry
"""

from __future__ import annotations

from gateway.store.queries.attestations import AttestationQueries
from gateway.store.queries.audit import AuditQueries
from gateway.store.queries.budgets import BudgetQueries
from gateway.store.queries.checkmaps import CheckmapQueries
from gateway.store.queries.common import (
    ENTRY_COLUMNS,
    STATE_FILTERS,
    QueryBase,
    _dump,
    _entry,
    _load,
    _project,
    _where,
)
from gateway.store.queries.entries import EntryQueries
from gateway.store.queries.learning import LearningQueries
from gateway.store.queries.meta import MetaQueries
from gateway.store.queries.projects import ProjectQueries
from gateway.store.queries.proposals import ProposalQueries
from gateway.store.queries.recalls import INSERT_RECALL, RECALLED_ENTRIES, RecallQueries
from gateway.store.queries.sessions import SessionQueries
from gateway.store.queries.supports import SupportQueries
from gateway.store.queries.threads import ThreadQueries
from gateway.store.queries.vectors import VectorQueries

__all__ = [
    "ENTRY_COLUMNS",
    "INSERT_RECALL",
    "RECALLED_ENTRIES",
    "STATE_FILTERS",
    "Queries",
    "QueryBase",
    "_dump",
    "_entry",
    "_load",
    "_project",
    "_where",
]


class Queries(
    MetaQueries,
    ProjectQueries,
    SessionQueries,
    RecallQueries,
    EntryQueries,
    SupportQueries,
    AuditQueries,
    BudgetQueries,
    AttestationQueries,
    CheckmapQueries,
    ProposalQueries,
    ThreadQueries,
    LearningQueries,
    VectorQueries,
):
    """One transaction's queries, every domain's."""
