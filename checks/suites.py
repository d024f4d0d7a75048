"""The data-quality invariants of the audit tables, as Great Expectations 1.x suites.

One suite per frame. Most frames are a table as stored; three are derived by ``app.quality.frames`` so
that a cross-row or cross-table rule becomes a plain column expectation whose failure shows the
offending rows:

- ``checkpoint_completion``: one row per checkpoint snapshot that should have completed, with
  ``snapshot_without_completion`` naming it when no CHECKPOINT_COMPLETED followed;
- ``commits_vs_checkpoints``: per audited partition, the group's latest committed offset next to the
  latest completed checkpoint's offset, both as the latest reconcile run computed them
  (``partition_summary``), so the check and the dashboard's commit lag share one definition;
- ``confirmed_gaps``: the confirmed GAP findings of the latest reconcile run;
- ``completeness_floor``: the final windows of the completeness table whose completeness is known,
  ``window_below_floor`` naming ('job/topic/partition/window start') each under the configured
  floor (`completeness.floor`), so a failure names the windows.

Every check carries a severity from ``app.contracts.vocabulary.SEVERITIES``; `offset-audit check --fail-on`
compares against it. Structural invariants are 'error', a commit beyond the completed checkpoints is
'critical' (like the COMMITTED_AHEAD finding: a manual restart from the group would skip data),
commit lag over its threshold is 'warn' (lag alone loses nothing), a final window under the
completeness floor is 'error' (records expected that did not land: lost or unverifiable).

The suites know the audit tables' vocabulary (``app.contracts``) and nothing else of the
application: their bounds come in as ``Thresholds``, which the caller fills from its configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import great_expectations.expectations as gxe
from great_expectations.expectations.metadata_types import FailureSeverity

from app.contracts.vocabulary import (
    CRITICAL,
    ENGINES,
    ERROR,
    EVENT_TYPES,
    FINDING_STATUSES,
    FINDING_TYPES,
    INFO,
    OFFSET_SEMANTICS,
    RECORD_KINDS,
    SEVERITIES,
    WARN,
)

# Our four severities onto Great Expectations' three, so Data Docs show the same ranking.
_GX_SEVERITY = {
    CRITICAL: FailureSeverity.CRITICAL,
    ERROR: FailureSeverity.CRITICAL,
    WARN: FailureSeverity.WARNING,
    INFO: FailureSeverity.INFO,
}

# The ledger's event identity (app.stream.ledger.event_key_column): detail's reason/error/attempt are
# extracted into columns by app.quality.frames.ledger_frame so GE can see them.
LEDGER_IDENTITY = (
    "job_name",
    "run_id",
    "checkpoint_id",
    "event_type",
    "topic",
    "partition",
    "detail_reason",
    "detail_error",
    "detail_attempt",
)


@dataclass(frozen=True)
class Thresholds:
    """The suites' tunable bounds: the `checks` section of the configuration, validated there."""

    max_confirmed_gaps: int  # confirmed GAP findings tolerated in the latest reconcile run
    max_commit_lag_offsets: int | None  # per partition; None: not checked
    max_commit_lag_seconds: int | None


@dataclass(frozen=True)
class Check:
    expectation: gxe.Expectation
    severity: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")


@dataclass(frozen=True)
class SuiteSpec:
    name: str  # the GE suite name, also the `suite` column of validation_results
    table: str  # the audit table the frame comes from
    frame: str  # which frame app.quality.frames builds for it
    checks: tuple[Check, ...]


def check(
    expectation_cls: Callable[..., gxe.Expectation], severity: str = "error", **kwargs: object
) -> Check:
    """An expectation tagged with our severity (in meta, read back from the results) and GE's."""
    expectation = expectation_cls(meta={"severity": severity}, severity=_GX_SEVERITY[severity], **kwargs)
    return Check(expectation, severity)


def not_null(*columns: str) -> list[Check]:
    return [check(gxe.ExpectColumnValuesToNotBeNull, column=c) for c in columns]


def non_negative(*columns: str) -> list[Check]:
    # Nulls pass: a null offset is a sentinel ("no offset yet") or a tombstone, by contract.
    return [check(gxe.ExpectColumnValuesToBeBetween, column=c, min_value=0) for c in columns]


def in_set(column: str, values: tuple[str, ...]) -> Check:
    return check(gxe.ExpectColumnValuesToBeInSet, column=column, value_set=list(values))


# --- one function per suite ----------------------------------------------------------------------


def ledger_suite() -> SuiteSpec:
    checks = [
        *not_null("job_name", "run_id", "engine", "event_type", "event_time", "event_date"),
        in_set("event_type", EVENT_TYPES),
        in_set("engine", ENGINES),
        in_set("offset_semantics", OFFSET_SEMANTICS),
        *non_negative("offset", "checkpoint_id"),
        # A retried micro-batch must not write its events twice (CONTRACTS.md section 4). Nulls take part
        # in the identity (RUN_STARTED has no topic), so no row is exempt.
        check(gxe.ExpectCompoundColumnsToBeUnique, column_list=list(LEDGER_IDENTITY), ignore_row_if="never"),
    ]
    return SuiteSpec("ledger", "ledger", "ledger", tuple(checks))


def checkpoint_completion_suite() -> SuiteSpec:
    checks = [check(gxe.ExpectColumnValuesToBeNull, column="snapshot_without_completion")]
    return SuiteSpec("ledger.checkpoint_completion", "ledger", "checkpoint_completion", tuple(checks))


def group_commits_suite() -> SuiteSpec:
    checks = [
        *not_null("group_id", "topic", "partition", "record_kind", "ingest_run_id"),
        in_set("record_kind", RECORD_KINDS),
        *non_negative("committed_offset", "partition"),
        # (log_partition, log_offset) is unique by contract; Admin-API snapshot rows have neither.
        check(
            gxe.ExpectCompoundColumnsToBeUnique,
            column_list=["log_partition", "log_offset"],
            ignore_row_if="any_value_is_missing",
        ),
    ]
    return SuiteSpec("group_commits", "group_commits", "group_commits", tuple(checks))


def commits_vs_checkpoints_suite() -> SuiteSpec:
    checks = [
        check(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB,
            severity="critical",
            column_A="completed_offset",
            column_B="committed_offset",
            or_equal=True,
            ignore_row_if="either_value_is_missing",
        )
    ]
    return SuiteSpec(
        "group_commits.within_checkpoints", "group_commits", "commits_vs_checkpoints", tuple(checks)
    )


def findings_suite() -> SuiteSpec:
    checks = [
        *not_null("finding_id", "reconcile_run_id", "detected_at", "finding_type", "severity", "status"),
        in_set("finding_type", FINDING_TYPES),
        in_set("severity", SEVERITIES),
        in_set("status", FINDING_STATUSES),
        # Re-running a reconciliation must not duplicate findings (CONTRACTS.md section 4).
        check(gxe.ExpectColumnValuesToBeUnique, column="finding_id"),
        *non_negative("offset_start", "offset_end", "record_count"),
        check(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB,
            column_A="offset_end",
            column_B="offset_start",
            or_equal=True,
            ignore_row_if="either_value_is_missing",
        ),
    ]
    return SuiteSpec("findings", "findings", "findings", tuple(checks))


def confirmed_gaps_suite(limits: Thresholds) -> SuiteSpec:
    checks = [check(gxe.ExpectTableRowCountToBeBetween, min_value=0, max_value=limits.max_confirmed_gaps)]
    return SuiteSpec("findings.confirmed_gaps", "findings", "confirmed_gaps", tuple(checks))


def partition_summary_suite(limits: Thresholds) -> SuiteSpec:
    checks = [
        *not_null("reconcile_run_id", "job_name", "topic", "partition"),
        *non_negative(
            "sink_count",
            "sink_distinct",
            "sink_min_offset",
            "last_checkpoint_offset",
            "last_committed_offset",
        ),
        check(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB,
            column_A="sink_count",
            column_B="sink_distinct",
            or_equal=True,
            ignore_row_if="either_value_is_missing",
        ),
    ]
    if limits.max_commit_lag_offsets is not None:
        checks.append(
            check(
                gxe.ExpectColumnValuesToBeBetween,
                severity="warn",
                column="commit_lag_offsets",
                max_value=limits.max_commit_lag_offsets,
            )
        )
    if limits.max_commit_lag_seconds is not None:
        checks.append(
            check(
                gxe.ExpectColumnValuesToBeBetween,
                severity="warn",
                column="commit_lag_seconds",
                max_value=limits.max_commit_lag_seconds,
            )
        )
    return SuiteSpec("partition_summary", "partition_summary", "partition_summary", tuple(checks))


def completeness_suite() -> SuiteSpec:
    checks = [check(gxe.ExpectColumnValuesToBeNull, column="window_below_floor")]
    return SuiteSpec("completeness.floor", "completeness", "completeness_floor", tuple(checks))


def all_suites(limits: Thresholds) -> list[SuiteSpec]:
    return [
        ledger_suite(),
        checkpoint_completion_suite(),
        group_commits_suite(),
        commits_vs_checkpoints_suite(),
        findings_suite(),
        confirmed_gaps_suite(limits),
        partition_summary_suite(limits),
        completeness_suite(),
    ]
