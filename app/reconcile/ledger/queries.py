"""What a finding rule may ask of one window's ledger and group commits.

The rules (``rules``, ``commit_rules``) take this protocol and ``audit.LedgerAudit``
implements it, so the rules never import the audit that calls them (the audit imports the rules).
"""

from __future__ import annotations

from typing import Any, Protocol

from app.reconcile.findings import AuditWindow, MatchRules


class LedgerQueries(Protocol):
    """The window's in-process database: its views (``app.reconcile.ledger.sql``) and what bounds it."""

    @property
    def window(self) -> AuditWindow: ...

    @property
    def rules(self) -> MatchRules: ...

    def rows(self, sql: str) -> list[dict[str, Any]]:
        """The rows of a query over the views, as dicts."""
        ...

    def within(self, expr: str) -> str:
        """SQL of the window test: ``expr`` in [since, until); null is outside."""
        ...

    def ensure_matched(self) -> None:
        """Creates the ``matched`` table (each group commit with the job's claim on it) once."""
        ...

    def restarts(self) -> list[dict[str, Any]]:
        """One row per run start in the window and partition, classified."""
        ...
