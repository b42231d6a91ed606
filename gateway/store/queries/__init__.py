"""Every SQL statement of the gateway, written once for both backends.

`Queries` wraps one transaction (`Tx`): placeholders are `?` (the PostgreSQL
driver rewrites them), JSON columns are TEXT holding JSON, moments are epoch
floats.  The statements are grouped by domain, one module each (entries,
supports, audit, budgets, recalls, vectors, attestations, checkmaps, ...), so a
domain's SQL reads on one page; `Queries` is all of them on one transaction,
the one object the services and the drivers know.  The recall index is
`gateway.store.recall_index`.
"""

from __future__ import annotations

from gateway.store.queries.attestations import AttestationQueries
from gateway.store.queries.audit import AuditQueries
from gateway.store.queries.budgets import BudgetQueries
from gateway.store.queries.checkmaps import CheckmapQueries
from gateway.store.queries.common import _project
from gateway.store.queries.entries import EntryQueries
from gateway.store.queries.learning import LearningQueries
from gateway.store.queries.meta import MetaQueries
from gateway.store.queries.projects import ProjectQueries
from gateway.store.queries.proposals import ProposalQueries
from gateway.store.queries.recalls import RecallQueries
from gateway.store.queries.sessions import SessionQueries
from gateway.store.queries.supports import SupportQueries
from gateway.store.queries.threads import ThreadQueries
from gateway.store.queries.vectors import VectorQueries

__all__ = ["Queries", "_project"]


class Queries(
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
    MetaQueries,
):
    """One transaction's queries, every domain's."""
