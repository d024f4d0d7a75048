"""The words the tables are written in (shared/DESIGN.md sections 3-5), each defined once.

Every value a table column may hold from a closed set is a named constant here, and each set is a
tuple of those constants, so a name cannot drift from its set. Writers (the committer, the
streaming job) and readers (the driver-side SQL of the audit, the checks, the dashboard) take their
literals from this module; nothing else spells them.
"""

from __future__ import annotations

from typing import Final

# --- engines and their offset dialects (DESIGN section 3) -------------------------------------------

ENGINE_SPARK: Final = "spark"
ENGINE_FLINK_LEGACY: Final = "flink-legacy"
ENGINE_FLINK_KAFKASOURCE: Final = "flink-kafkasource"
ENGINES: Final = (ENGINE_SPARK, ENGINE_FLINK_LEGACY, ENGINE_FLINK_KAFKASOURCE)

SEMANTICS_NEXT: Final = "next"
SEMANTICS_LAST_PROCESSED: Final = "last_processed"
OFFSET_SEMANTICS: Final = (SEMANTICS_NEXT, SEMANTICS_LAST_PROCESSED)

# --- ledger events ----------------------------------------------------------------------------------

EVENT_RUN_STARTED: Final = "RUN_STARTED"
EVENT_OFFSETS_RESTORED: Final = "OFFSETS_RESTORED"
EVENT_CHECKPOINT_SNAPSHOT: Final = "CHECKPOINT_SNAPSHOT"
EVENT_CHECKPOINT_COMPLETED: Final = "CHECKPOINT_COMPLETED"
EVENT_COMMIT_REQUESTED: Final = "COMMIT_REQUESTED"
EVENT_COMMIT_SKIPPED: Final = "COMMIT_SKIPPED"
EVENT_COMMIT_SUCCEEDED: Final = "COMMIT_SUCCEEDED"
EVENT_COMMIT_FAILED: Final = "COMMIT_FAILED"
EVENT_RUN_STOPPED: Final = "RUN_STOPPED"
EVENT_TYPES: Final = (
    EVENT_RUN_STARTED,
    EVENT_OFFSETS_RESTORED,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_COMMIT_REQUESTED,
    EVENT_COMMIT_SKIPPED,
    EVENT_COMMIT_SUCCEEDED,
    EVENT_COMMIT_FAILED,
    EVENT_RUN_STOPPED,
)

# Why the committer did not send a checkpoint's offsets (detail.reason of COMMIT_SKIPPED).
SKIP_SUPERSEDED_IN_FLIGHT: Final = "superseded_in_flight"
SKIP_PENDING_EVICTED: Final = "pending_evicted"
SKIP_UNKNOWN_CHECKPOINT: Final = "unknown_checkpoint"
SKIP_EMPTY_OFFSETS: Final = "empty_offsets"
SKIP_COMMIT_DISABLED: Final = "commit_disabled"
SKIP_REASONS: Final = (
    SKIP_SUPERSEDED_IN_FLIGHT,
    SKIP_PENDING_EVICTED,
    SKIP_UNKNOWN_CHECKPOINT,
    SKIP_EMPTY_OFFSETS,
    SKIP_COMMIT_DISABLED,
)
# The skips a newer checkpoint's commit makes harmless by design (Flink's stale-commit rule).
SUPERSEDED_SKIP_REASONS: Final = (SKIP_SUPERSEDED_IN_FLIGHT, SKIP_PENDING_EVICTED, SKIP_UNKNOWN_CHECKPOINT)

# Where a run's start offsets came from (detail.source of OFFSETS_RESTORED).
RESTORE_CHECKPOINT: Final = "checkpoint"
RESTORE_GROUP: Final = "group"
RESTORE_EARLIEST: Final = "earliest"
RESTORE_LATEST: Final = "latest"
RESTORE_TIMESTAMP: Final = "timestamp"
RESTORE_SPECIFIC: Final = "specific"
RESTORE_SOURCES: Final = (
    RESTORE_CHECKPOINT,
    RESTORE_GROUP,
    RESTORE_EARLIEST,
    RESTORE_LATEST,
    RESTORE_TIMESTAMP,
    RESTORE_SPECIFIC,
)

# Error names of commit outcomes Kafka never reported: the committer made them up, so they are
# spelled like Kafka error names but can never collide with one (Kafka's are upper-case codes like
# REBALANCE_IN_PROGRESS; none of these exists in the protocol).
ERROR_OUTCOME_UNKNOWN: Final = "OUTCOME_UNKNOWN"
ERROR_NOT_SENT: Final = "NOT_SENT"

# Keys of the ledger's JSON `detail` that the audit reads back.
DETAIL_ATTEMPT: Final = "attempt"
DETAIL_ERROR: Final = "error"
DETAIL_RETRIABLE: Final = "retriable"
DETAIL_MESSAGE: Final = "message"
DETAIL_REASON: Final = "reason"
DETAIL_SOURCE: Final = "source"
DETAIL_RESUME_SOURCE: Final = "resume_source"  # RUN_STARTED
DETAIL_RECOVERED: Final = "recovered"
DETAIL_SUPERSEDED_BY: Final = "superseded_by"
DETAIL_DISCARDED_PENDING: Final = "discarded_pending"

# --- group_commits ----------------------------------------------------------------------------------

RECORD_COMMIT: Final = "commit"
RECORD_TOMBSTONE: Final = "tombstone"
RECORD_SNAPSHOT: Final = "snapshot"
RECORD_KINDS: Final = (RECORD_COMMIT, RECORD_TOMBSTONE, RECORD_SNAPSHOT)

# --- findings (DESIGN section 5) ----------------------------------------------------------------------

GAP: Final = "GAP"
DUPLICATE: Final = "DUPLICATE"
SKIPPED_COMMIT: Final = "SKIPPED_COMMIT"
COMMIT_FAILURE: Final = "COMMIT_FAILURE"
COMMIT_MISMATCH: Final = "COMMIT_MISMATCH"
FOREIGN_COMMIT: Final = "FOREIGN_COMMIT"
COMMIT_REGRESSION: Final = "COMMIT_REGRESSION"
COMMITTED_AHEAD: Final = "COMMITTED_AHEAD"
RESTART_REPLAY: Final = "RESTART_REPLAY"
RESTART_SKIP: Final = "RESTART_SKIP"
SINK_BEYOND_CHECKPOINT: Final = "SINK_BEYOND_CHECKPOINT"
LEDGER_INCONSISTENT: Final = "LEDGER_INCONSISTENT"
UNCLEAN_STOP: Final = "UNCLEAN_STOP"
FINDING_TYPES: Final = (
    GAP,
    DUPLICATE,
    SKIPPED_COMMIT,
    COMMIT_FAILURE,
    COMMIT_MISMATCH,
    FOREIGN_COMMIT,
    COMMIT_REGRESSION,
    COMMITTED_AHEAD,
    RESTART_REPLAY,
    RESTART_SKIP,
    SINK_BEYOND_CHECKPOINT,
    LEDGER_INCONSISTENT,
    UNCLEAN_STOP,
)

CRITICAL: Final = "critical"
ERROR: Final = "error"
WARN: Final = "warn"
INFO: Final = "info"
SEVERITIES: Final = (CRITICAL, ERROR, WARN, INFO)  # most severe first

OPEN: Final = "open"
CONFIRMED: Final = "confirmed"
BENIGN: Final = "benign"
UNVERIFIABLE: Final = "unverifiable"
FINDING_STATUSES: Final = (OPEN, CONFIRMED, BENIGN, UNVERIFIABLE)

# Why a checkpoint's offsets never reached the group (evidence.reason of SKIPPED_COMMIT).
SKIPPED_FAILED: Final = "failed"
SKIPPED_SUPERSEDED: Final = "superseded"
SKIPPED_DISABLED: Final = SKIP_COMMIT_DISABLED
SKIPPED_ACKNOWLEDGED_NOT_FOUND: Final = "acknowledged_not_found"
SKIPPED_NEVER_ATTEMPTED: Final = "never_attempted"
SKIPPED_REASONS: Final = (
    SKIPPED_FAILED,
    SKIPPED_SUPERSEDED,
    SKIPPED_DISABLED,
    SKIPPED_ACKNOWLEDGED_NOT_FOUND,
    SKIPPED_NEVER_ATTEMPTED,
)

# --- restarts and incidents ---------------------------------------------------------------------------

RESTART_EXACT: Final = "exact"
RESTART_REPLAYED: Final = "replay"
RESTART_SKIPPED: Final = "skip"
RESTART_UNKNOWN: Final = "unknown"
RESTART_CLASSES: Final = (RESTART_EXACT, RESTART_REPLAYED, RESTART_SKIPPED, RESTART_UNKNOWN)

INCIDENT_RESTART: Final = "restart"
INCIDENT_UNCLEAN_STOP: Final = "unclean_stop"
INCIDENT_EXTERNAL_OFFSET_CHANGE: Final = "external_offset_change"
INCIDENT_COMMIT_OUTAGE: Final = "commit_outage"
INCIDENT_SECOND_WRITER: Final = "second_writer"
INCIDENT_LEDGER_GAP: Final = "ledger_gap"
INCIDENT_GAP: Final = "gap"
INCIDENT_SKIPPED_COMMIT: Final = "skipped_commit"
INCIDENT_KINDS: Final = (
    INCIDENT_RESTART,
    INCIDENT_UNCLEAN_STOP,
    INCIDENT_EXTERNAL_OFFSET_CHANGE,
    INCIDENT_COMMIT_OUTAGE,
    INCIDENT_SECOND_WRITER,
    INCIDENT_LEDGER_GAP,
    INCIDENT_GAP,
    INCIDENT_SKIPPED_COMMIT,
)
INCIDENT_OPEN: Final = "open"
INCIDENT_RESOLVED: Final = "resolved"
INCIDENT_STATUSES: Final = (INCIDENT_OPEN, INCIDENT_RESOLVED)

# --- audit_runs: the run records of reconcile and forensics -------------------------------------------

RUN_SUCCEEDED: Final = "succeeded"
RUN_PENDING: Final = "pending"
RUN_FAILED: Final = "failed"
RUN_STATUSES: Final = (RUN_SUCCEEDED, RUN_PENDING, RUN_FAILED)
