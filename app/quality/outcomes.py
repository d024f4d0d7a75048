"""What a check found, as typed values: one outcome per expectation, grouped by suite, and the
summary of a run that the command prints, the nightly counts and ``validation_results`` stores."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.contracts.vocabulary import SEVERITIES


@dataclass(frozen=True)
class ExpectationOutcome:
    suite: str
    table: str
    expectation: str
    kwargs: Mapping[str, Any]
    severity: str
    success: bool
    observed: Mapping[str, Any]

    @property
    def label(self) -> str:
        target = self.kwargs.get("column") or self.kwargs.get("column_list")
        if target is None and "column_A" in self.kwargs:
            target = f"{self.kwargs['column_A']} >= {self.kwargs['column_B']}"
        return f"{self.expectation}({target})" if target else self.expectation


@dataclass(frozen=True)
class SuiteOutcome:
    name: str
    table: str
    expectations: tuple[ExpectationOutcome, ...] = ()
    skipped: str | None = None  # why the suite did not run (its table does not exist yet)

    @property
    def success(self) -> bool:
        return all(e.success for e in self.expectations)


@dataclass(frozen=True)
class CheckSummary:
    run_id: str
    evaluated_at: datetime
    suites: tuple[SuiteOutcome, ...]
    reconcile_run_id: str | None = None  # the run whose findings and summary were checked
    data_docs: str | None = None  # URL of the Data Docs index
    results_table: str | None = None

    @property
    def outcomes(self) -> list[ExpectationOutcome]:
        return [e for s in self.suites for e in s.expectations]

    def failed(self, at_or_above: str = "info") -> list[ExpectationOutcome]:
        """Failed expectations whose severity is ``at_or_above`` or more severe."""
        limit = SEVERITIES.index(at_or_above)
        return [e for e in self.outcomes if not e.success and SEVERITIES.index(e.severity) <= limit]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "evaluated_at": self.evaluated_at.isoformat(),
            "reconcile_run_id": self.reconcile_run_id,
            "data_docs": self.data_docs,
            "results_table": self.results_table,
            "suites": [
                {
                    "suite": s.name,
                    "table": s.table,
                    "success": s.success,
                    "skipped": s.skipped,
                    "evaluated": len(s.expectations),
                    "failed": [
                        {"expectation": e.label, "severity": e.severity, "observed": e.observed}
                        for e in s.expectations
                        if not e.success
                    ],
                }
                for s in self.suites
            ],
        }
