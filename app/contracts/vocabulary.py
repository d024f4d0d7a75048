"""The words the tables are written in (CONTRACTS.md sections 3-5), each defined once.

Every value a table column may hold from a closed set is a named constant here, and each set is a
tuple of those values, so a name cannot drift from its set. Each set is spelled once as its tuple
of values and unpacked into its named constants in the same order (tests/unit/test_vocabulary.py
checks that every name spells its value). Writers (the committer, the streaming job) and readers
(the driver-side SQL of the audit, the checks, the dashboard) take their literals from this
module; nothing else spells them (tests/unit/test_vocabulary_spelling.py finds a word spelled
elsewhere). ``severity_at_least`` is the one test of a severity against a threshold.
"""

from __future__ import annotations

from typing import Final

# fmt: off
# Unpacked sets stay packed on a few lines: one name per line would repeat the same line shape
# for every set.

# --- engines and their offset dialects (CONTRACTS.md section 3) ------------------------------------

ENGINES: Final = ("spark", "flink-legacy", "flink-kafkasource")
ENGINE_SPARK, ENGINE_FLINK_LEGACY, ENGINE_FLINK_KAFKASOURCE = ENGINES

OFFSET_SEMANTICS: Final = ("next", "last_processed")
SEMANTICS_NEXT, SEMANTICS_LAST_PROCESSED = OFFSET_SEMANTICS

# --- ledger events ----------------------------------------------------------------------------------

EVENT_TYPES: Final = (
    "RUN_STARTED", "OFFSETS_RESTORED", "CHECKPOINT_SNAPSHOT", "CHECKPOINT_COMPLETED",
    "COMMIT_REQUESTED", "COMMIT_SKIPPED", "COMMIT_SUCCEEDED", "COMMIT_FAILED", "RUN_STOPPED",
)
(EVENT_RUN_STARTED, EVENT_OFFSETS_RESTORED, EVENT_CHECKPOINT_SNAPSHOT, EVENT_CHECKPOINT_COMPLETED,
 EVENT_COMMIT_REQUESTED, EVENT_COMMIT_SKIPPED, EVENT_COMMIT_SUCCEEDED, EVENT_COMMIT_FAILED,
 EVENT_RUN_STOPPED) = EVENT_TYPES

# Why the committer did not send a checkpoint's offsets (detail.reason of COMMIT_SKIPPED).
SKIP_REASONS: Final = (
    "superseded_in_flight", "pending_evicted", "unknown_checkpoint", "empty_offsets", "commit_disabled",
)
(SKIP_SUPERSEDED_IN_FLIGHT, SKIP_PENDING_EVICTED, SKIP_UNKNOWN_CHECKPOINT, SKIP_EMPTY_OFFSETS,
 SKIP_COMMIT_DISABLED) = SKIP_REASONS
# The skips a newer checkpoint's commit makes harmless by design (Flink's stale-commit rule).
SUPERSEDED_SKIP_REASONS: Final = (SKIP_SUPERSEDED_IN_FLIGHT, SKIP_PENDING_EVICTED, SKIP_UNKNOWN_CHECKPOINT)

# Where a run's start offsets came from (detail.source of OFFSETS_RESTORED).
# A Flink job restored from a savepoint says so (a checkpoint restore is `checkpoint`).
RESTORE_SOURCES: Final = ("checkpoint", "group", "earliest", "latest", "timestamp", "specific", "savepoint")
(RESTORE_CHECKPOINT, RESTORE_GROUP, RESTORE_EARLIEST, RESTORE_LATEST, RESTORE_TIMESTAMP,
 RESTORE_SPECIFIC, RESTORE_SAVEPOINT) = RESTORE_SOURCES
# The values of stream.startup_mode: every source but the checkpoint, whose restored state always
# wins when there is one (Flink's rule). And of stream.reset_strategy: where a partition the mode
# has no offset for starts.
STARTUP_MODES: Final = (RESTORE_GROUP, RESTORE_EARLIEST, RESTORE_LATEST, RESTORE_TIMESTAMP, RESTORE_SPECIFIC)
RESET_STRATEGIES: Final = (RESTORE_EARLIEST, RESTORE_LATEST)

# Error names of commit outcomes Kafka never reported: the committer made them up, so they are
# spelled like Kafka error names but can never collide with one (Kafka's are upper-case codes like
# REBALANCE_IN_PROGRESS; none of these exists in the protocol).
ERROR_OUTCOME_UNKNOWN, ERROR_NOT_SENT = "OUTCOME_UNKNOWN", "NOT_SENT"
# A Flink job's commits its Kafka source counted as failed (its commitsFailed metric rose between two
# polls of flink-watch): Flink's callback saw Kafka's error, the metric keeps only the count.
ERROR_COMMITS_FAILED_METRIC = "COMMITS_FAILED_METRIC"

# Keys of the ledger's JSON `detail` that the audit reads back (resume_source: OFFSETS_RESTORED's
# source, as another writer may name it).
DETAIL_KEYS: Final = (
    "attempt", "error", "retriable", "message", "reason", "source", "resume_source", "recovered",
    "superseded_by", "evicted_by", "discarded_pending",
)
(DETAIL_ATTEMPT, DETAIL_ERROR, DETAIL_RETRIABLE, DETAIL_MESSAGE, DETAIL_REASON, DETAIL_SOURCE,
 DETAIL_RESUME_SOURCE, DETAIL_RECOVERED, DETAIL_SUPERSEDED_BY, DETAIL_EVICTED_BY,
 DETAIL_DISCARDED_PENDING) = DETAIL_KEYS
# The streaming query a run belongs to (RUN_STARTED of attached and imported runs: the id in its
# checkpoint's metadata), and the mark of events rebuilt from a checkpoint by `ledger-import`.
DETAIL_QUERY_ID: Final = "query_id"
DETAIL_IMPORTED: Final = "imported"
# A run's start (RUN_STARTED): how and from which checkpoint it started, the version that wrote it,
# the topics and how many partitions the reference job reads, the Spark checkpoint directory, notes
# on the plan, and the mark of a run written by `attach` (as `imported` marks an import's). Where
# the plan of an OFFSETS_RESTORED came from (`mode`); who rebuilt a dead run's events (`recovered_by`).
DETAIL_RUN_KEYS: Final = (
    "startup_mode", "restored_checkpoint_id", "app_version", "topics", "partitions", "checkpoint",
    "notes", "attached", "mode", "recovered_by",
)
(DETAIL_STARTUP_MODE, DETAIL_RESTORED_CHECKPOINT_ID, DETAIL_APP_VERSION, DETAIL_TOPICS, DETAIL_PARTITIONS,
 DETAIL_CHECKPOINT, DETAIL_NOTES, DETAIL_ATTACHED, DETAIL_MODE, DETAIL_RECOVERED_BY) = DETAIL_RUN_KEYS
# A run's counts (RUN_STOPPED): the batches it wrote, its commits' outcomes, the events it recovered
# and the ledger operations that failed after their retries (attached runs), the checkpoints it
# recorded (Flink runs).
DETAIL_STOP_KEYS: Final = (
    "batches", "successful_commits", "failed_commits", "recovered_events", "ledger_write_failures",
    "checkpoints_recorded",
)
(DETAIL_BATCHES, DETAIL_SUCCESSFUL_COMMITS, DETAIL_FAILED_COMMITS, DETAIL_RECOVERED_EVENTS,
 DETAIL_LEDGER_WRITE_FAILURES, DETAIL_CHECKPOINTS_RECORDED) = DETAIL_STOP_KEYS
# What `ledger-import --sink` adds from a Delta sink's log (`stream.sink_evidence`): on RUN_STARTED the
# sink and the query's txn app id; on each CHECKPOINT_COMPLETED the sink versions that hold the batch,
# when the sink first committed it, and its status: held, lacked (never committed, or undone by a
# RESTORE), unverifiable (completed before the oldest commit file log cleanup left).
DETAIL_SINK_KEYS: Final = ("sink", "sink_app_id", "sink_versions", "sink_committed_at", "sink_status")
(DETAIL_SINK, DETAIL_SINK_APP_ID, DETAIL_SINK_VERSIONS, DETAIL_SINK_COMMITTED_AT,
 DETAIL_SINK_STATUS) = DETAIL_SINK_KEYS
SINK_STATUSES: Final = ("held", "lacked", "unverifiable")
SINK_HELD, SINK_LACKED, SINK_UNVERIFIABLE = SINK_STATUSES
# A Flink job's events (`flink-watch`, `flink-import`): the Flink job id of the run (its RUN_STARTED),
# where a checkpoint or savepoint lies, whether it is a savepoint, the operator whose state held the
# offsets; the checkpoints Flink completed that the ledger holds no offsets of (on the next recorded
# CHECKPOINT_COMPLETED and in RUN_STOPPED), the failed ones (RUN_STOPPED); and the mark of a commit the
# sidecar did not see but that Flink sends by design on a checkpoint's completion (COMMIT_REQUESTED).
# An attempt started without state: the checkpoint that bounded where its sources started
# (OFFSETS_RESTORED). How many commits the source's metric counted as failed (COMMIT_FAILED).
DETAIL_FLINK_KEYS: Final = (
    "flink_job_id", "external_path", "savepoint", "operator_id", "missed_checkpoints", "failed_checkpoints",
    "inferred", "startup_checkpoint", "commits_failed",
)
(DETAIL_FLINK_JOB_ID, DETAIL_EXTERNAL_PATH, DETAIL_SAVEPOINT, DETAIL_OPERATOR_ID, DETAIL_MISSED_CHECKPOINTS,
 DETAIL_FAILED_CHECKPOINTS, DETAIL_INFERRED, DETAIL_STARTUP_CHECKPOINT,
 DETAIL_COMMITS_FAILED) = DETAIL_FLINK_KEYS
# Why a completed Flink checkpoint has no offsets in the ledger (each entry of missed_checkpoints):
# its files were deleted before they were read (execution.checkpointing.num-retained too low for the
# poll), its _metadata could not be decoded, it left the REST history between two polls, or Flink
# reported no external path for it.
MISSED_REASONS: Final = ("files_gone", "unreadable", "not_in_history", "no_external_path")
MISSED_FILES_GONE, MISSED_UNREADABLE, MISSED_NOT_IN_HISTORY, MISSED_NO_EXTERNAL_PATH = MISSED_REASONS

# --- sinks: how reconcile judges a job's sink (CONTRACTS.md section 4) ------------------------------

SINK_MODES: Final = ("coordinates", "delta_batches", "none", "iceberg_snapshots")
SINK_COORDINATES, SINK_DELTA_BATCHES, SINK_NONE, SINK_ICEBERG_SNAPSHOTS = SINK_MODES
# The modes that judge a sink's batches by its log (rows cannot be tied to offsets): Delta's commit
# files, Iceberg's snapshot summaries. Their findings, incidents and completeness are the same.
BATCH_SINK_MODES: Final = (SINK_DELTA_BATCHES, SINK_ICEBERG_SNAPSHOTS)

# --- group_commits ----------------------------------------------------------------------------------

RECORD_KINDS: Final = ("commit", "tombstone", "snapshot")
RECORD_COMMIT, RECORD_TOMBSTONE, RECORD_SNAPSHOT = RECORD_KINDS

# --- group_events: a group's metadata record, or its tombstone (the group was removed) ------------

GROUP_EVENT_KINDS: Final = ("metadata", RECORD_TOMBSTONE)
GROUP_EVENT_METADATA, GROUP_EVENT_TOMBSTONE = GROUP_EVENT_KINDS

# --- findings (CONTRACTS.md section 5) ---------------------------------------------------------------

FINDING_TYPES: Final = (
    "GAP", "DUPLICATE", "SKIPPED_COMMIT", "COMMIT_FAILURE", "COMMIT_MISMATCH", "FOREIGN_COMMIT",
    "COMMIT_REGRESSION", "COMMITTED_AHEAD", "RESTART_REPLAY", "RESTART_SKIP", "SINK_BEYOND_CHECKPOINT",
    "LEDGER_INCONSISTENT", "UNCLEAN_STOP", "BATCH_NOT_IN_SINK", "BATCH_WRITTEN_TWICE",
    "SINK_COMMIT_UNEXPLAINED", "MISSED_CHECKPOINT_COMMIT",
)
(GAP, DUPLICATE, SKIPPED_COMMIT, COMMIT_FAILURE, COMMIT_MISMATCH, FOREIGN_COMMIT, COMMIT_REGRESSION,
 COMMITTED_AHEAD, RESTART_REPLAY, RESTART_SKIP, SINK_BEYOND_CHECKPOINT, LEDGER_INCONSISTENT,
 UNCLEAN_STOP, BATCH_NOT_IN_SINK, BATCH_WRITTEN_TWICE, SINK_COMMIT_UNEXPLAINED,
 MISSED_CHECKPOINT_COMMIT) = FINDING_TYPES

SEVERITIES: Final = ("critical", "error", "warn", "info")  # most severe first
CRITICAL, ERROR, WARN, INFO = SEVERITIES

FINDING_STATUSES: Final = ("open", "confirmed", "benign", "unverifiable")
OPEN, CONFIRMED, BENIGN, UNVERIFIABLE = FINDING_STATUSES

# Why a checkpoint's offsets never reached the group (evidence.reason of SKIPPED_COMMIT); a commit
# switched off is the committer's own skip reason.
SKIPPED_REASONS: Final = (
    "failed", "superseded", SKIP_COMMIT_DISABLED, "acknowledged_not_found", "never_attempted",
)
(SKIPPED_FAILED, SKIPPED_SUPERSEDED, SKIPPED_DISABLED, SKIPPED_ACKNOWLEDGED_NOT_FOUND,
 SKIPPED_NEVER_ATTEMPTED) = SKIPPED_REASONS

# --- restarts and incidents ---------------------------------------------------------------------------

RESTART_CLASSES: Final = ("exact", "replay", "skip", "unknown")
RESTART_EXACT, RESTART_REPLAYED, RESTART_SKIPPED, RESTART_UNKNOWN = RESTART_CLASSES

INCIDENT_KINDS: Final = (
    "restart", "unclean_stop", "external_offset_change", "commit_outage", "second_writer", "ledger_gap",
    "gap", "skipped_commit", "lost_batch", "batch_reprocessed",
)
(INCIDENT_RESTART, INCIDENT_UNCLEAN_STOP, INCIDENT_EXTERNAL_OFFSET_CHANGE, INCIDENT_COMMIT_OUTAGE,
 INCIDENT_SECOND_WRITER, INCIDENT_LEDGER_GAP, INCIDENT_GAP, INCIDENT_SKIPPED_COMMIT, INCIDENT_LOST_BATCH,
 INCIDENT_BATCH_REPROCESSED) = INCIDENT_KINDS
INCIDENT_STATUSES: Final = ("open", "resolved")
INCIDENT_OPEN, INCIDENT_RESOLVED = INCIDENT_STATUSES

# What a step of an incident's remedy plan does (the `action` of each step in incidents.remedy).
REMEDY_ACTIONS: Final = ("replay", "delete_duplicates", "reset_offsets")
REMEDY_REPLAY, REMEDY_DELETE_DUPLICATES, REMEDY_RESET_OFFSETS = REMEDY_ACTIONS

# --- audit_runs: the run records of reconcile and forensics -------------------------------------------

RUN_STATUSES: Final = ("succeeded", "pending", "failed")
RUN_SUCCEEDED, RUN_PENDING, RUN_FAILED = RUN_STATUSES
# The commands that record runs (audit_runs.command); a run's default window starts where the last
# successful run of the same command over the same jobs ended.
RUN_COMMANDS: Final = ("reconcile", "forensics")
COMMAND_RECONCILE, COMMAND_FORENSICS = RUN_COMMANDS
# fmt: on


# --- the order of severities ----------------------------------------------------------------------


def severity_at_least(severity: str, threshold: str) -> bool:
    """True when ``severity`` is ``threshold`` or more severe: the one test of --fail-on and of every
    "at or above" (SEVERITIES is ordered most severe first)."""
    return SEVERITIES.index(severity) <= SEVERITIES.index(threshold)


def severities_at_least(threshold: str) -> tuple[str, ...]:
    """The severities at or above ``threshold``, most severe first."""
    return tuple(s for s in SEVERITIES if severity_at_least(s, threshold))
