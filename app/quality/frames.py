"""The frames the suites of ``checks.suites`` validate, each rule written once as SQL that either
engine runs (``app.quality.engines``): DuckDB in the driver for a table read into Arrow, Spark for a
large one. Most frames are a table as stored; the derived ones turn a cross-row or cross-table rule
into a column a plain expectation can judge, whose failure shows the offending rows.

Rule for "a completion for every snapshot": every checkpoint with a CHECKPOINT_SNAPSHOT has a
CHECKPOINT_COMPLETED in the same job and run, except the newest snapshotted checkpoint of each run.
That one may legitimately be in flight (the run is still going) or lost with the run (killed while
checkpointing); the restart forensics judge those, not this invariant. Over a window, the frame
holds the checkpoints snapshotted or completed in the window and each run's newest checkpoint
snapshotted before it (exempt last night, judged now that the run went on), judged against the
checkpoint events of the reconcile look-back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeAlias

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame

from app.contracts.tables import (
    COMPLETENESS_SCHEMA,
    FINDINGS_SCHEMA,
    LEDGER_SCHEMA,
    PARTITION_SUMMARY_SCHEMA,
)
from app.contracts.vocabulary import (
    CONFIRMED,
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_CHECKPOINT_SNAPSHOT,
    GAP,
)
from app.quality.engines import Relation, column_list, require, run

# --- the rules -----------------------------------------------------------------------------------

# Rows of one reconcile run, or every row when no run is known (before the first reconcile).
_OF_RUN: Final = "(CAST(:reconcile_run_id AS STRING) IS NULL OR reconcile_run_id = :reconcile_run_id)"

# The ledger plus detail's identity fields as columns (see app.stream.ledger.event_key_column).
LEDGER_SQL: Final = f"""
SELECT {column_list(LEDGER_SCHEMA.fieldNames())},
    get_json_object(detail, '$.reason') AS detail_reason,
    get_json_object(detail, '$.error') AS detail_error,
    get_json_object(detail, '$.attempt') AS detail_attempt
FROM ledger
"""

CHECKPOINT_EVENT_COLUMNS: Final = ("job_name", "run_id", "checkpoint_id", "event_type", "event_time")

# One row per snapshotted checkpoint that should have completed (module docstring).
CHECKPOINT_COMPLETION_SQL: Final = """
WITH events AS (
    SELECT job_name, run_id, checkpoint_id, event_type, event_time
    FROM checkpoint_events WHERE checkpoint_id IS NOT NULL
), snapshots AS (
    SELECT job_name, run_id, checkpoint_id, min(event_time) AS snapshot_at
    FROM events WHERE event_type = :snapshot GROUP BY job_name, run_id, checkpoint_id
), completions AS (
    SELECT job_name, run_id, checkpoint_id, min(event_time) AS completed_at
    FROM events WHERE event_type = :completed GROUP BY job_name, run_id, checkpoint_id
), judged AS (
    SELECT *,
        max(checkpoint_id) OVER run AS newest,
        max(CASE WHEN snapshot_at < CAST(:since AS TIMESTAMP) THEN checkpoint_id END) OVER run
            AS newest_before
    FROM snapshots
    WINDOW run AS (PARTITION BY job_name, run_id)
)
SELECT s.job_name, s.run_id, s.checkpoint_id, s.snapshot_at, c.completed_at,
    CASE WHEN c.completed_at IS NULL
        THEN concat_ws('/', s.job_name, s.run_id, CAST(s.checkpoint_id AS STRING)) END
        AS snapshot_without_completion
FROM judged s LEFT JOIN completions c
    ON s.job_name = c.job_name AND s.run_id = c.run_id AND s.checkpoint_id = c.checkpoint_id
WHERE s.checkpoint_id < s.newest
    AND (CAST(:since AS TIMESTAMP) IS NULL
        OR s.snapshot_at >= CAST(:since AS TIMESTAMP)
        OR c.completed_at >= CAST(:since AS TIMESTAMP)
        OR s.checkpoint_id = s.newest_before)
ORDER BY s.job_name, s.run_id, s.checkpoint_id
"""

# Per audited partition, the group's latest committed offset next to the latest completed
# checkpoint's offset, as reconcile computed them for its findings and the dashboard's commit lag
# (partition_summary): the check cannot disagree with them by defining either anew. No completed
# checkpoint covering the partition yet counts as 0: any positive commit is ahead of it.
COMMITS_VS_CHECKPOINTS_SQL: Final = f"""
SELECT job_name, group_id, topic, `partition`,
    last_committed_offset AS committed_offset,
    last_commit_time AS commit_time,
    coalesce(last_checkpoint_offset, 0) AS completed_offset
FROM partition_summary
WHERE last_committed_offset IS NOT NULL AND {_OF_RUN}
"""

# The confirmed GAP findings (real data loss).
CONFIRMED_GAPS_SQL: Final = f"""
SELECT {column_list(FINDINGS_SCHEMA.fieldNames())}
FROM findings
WHERE finding_type = :gap AND status = :confirmed AND {_OF_RUN}
"""

# Thresholds apply to the latest state; older summaries were checked by earlier runs.
PARTITION_SUMMARY_SQL: Final = f"""
SELECT {column_list(PARTITION_SUMMARY_SCHEMA.fieldNames())}
FROM partition_summary
WHERE {_OF_RUN}
"""


# The final windows whose completeness is known (a sink mode that cannot know it is not judged),
# each named 'job/topic/partition/window start' in ``window_below_floor`` when its completeness is
# under the floor. A provisional window may still fill up: it is judged once final. The window is
# named in UTC as both engines print a timestamp without its zone.
COMPLETENESS_FLOOR_SQL: Final = """
SELECT job_name, topic, `partition`, window_start, window_end, expected, landed, lost, unverifiable,
    completeness,
    CASE WHEN completeness < CAST(:floor AS DOUBLE)
        THEN concat_ws('/', job_name, topic, CAST(`partition` AS STRING),
            CAST(CAST(window_start AS TIMESTAMP) AS STRING)) END AS window_below_floor
FROM completeness
WHERE final AND completeness IS NOT NULL
ORDER BY job_name, topic, `partition`, window_start
"""


def ledger_frame(ledger: Relation) -> Relation:
    require(ledger, LEDGER_SCHEMA.fieldNames(), "ledger")
    return run(LEDGER_SQL, {"ledger": ledger})


def checkpoint_completion(events: Relation, since: datetime | None = None) -> Relation:
    """``snapshot_without_completion`` names ('job/run/checkpoint') each snapshotted checkpoint that
    never completed; ordered by job, run and checkpoint. With ``since``, only the checkpoints whose
    verdict the rows from ``since`` on can change (module docstring); ``events`` then holds the
    checkpoint events of the look-back too."""
    require(events, CHECKPOINT_EVENT_COLUMNS, "ledger")
    params = {"snapshot": EVENT_CHECKPOINT_SNAPSHOT, "completed": EVENT_CHECKPOINT_COMPLETED, "since": since}
    return run(CHECKPOINT_COMPLETION_SQL, {"checkpoint_events": events}, params)


def commits_vs_checkpoints(summary: Relation, reconcile_run_id: str | None = None) -> Relation:
    require(summary, PARTITION_SUMMARY_SCHEMA.fieldNames(), "partition_summary")
    return run(
        COMMITS_VS_CHECKPOINTS_SQL, {"partition_summary": summary}, {"reconcile_run_id": reconcile_run_id}
    )


def confirmed_gaps(findings: Relation, reconcile_run_id: str | None = None) -> Relation:
    require(findings, FINDINGS_SCHEMA.fieldNames(), "findings")
    params = {"gap": GAP, "confirmed": CONFIRMED, "reconcile_run_id": reconcile_run_id}
    return run(CONFIRMED_GAPS_SQL, {"findings": findings}, params)


def summary_of_run(summary: Relation, reconcile_run_id: str | None = None) -> Relation:
    require(summary, PARTITION_SUMMARY_SCHEMA.fieldNames(), "partition_summary")
    return run(PARTITION_SUMMARY_SQL, {"partition_summary": summary}, {"reconcile_run_id": reconcile_run_id})


def completeness_floor(completeness: Relation, floor: float) -> Relation:
    """The judged windows (``COMPLETENESS_FLOOR_SQL``); ``window_below_floor`` names those under
    ``floor``, null for the others."""
    require(completeness, COMPLETENESS_SCHEMA.fieldNames(), "completeness")
    return run(COMPLETENESS_FLOOR_SQL, {"completeness": completeness}, {"floor": floor})


def as_stored(table: Relation) -> Relation:
    return table


# --- every frame ---------------------------------------------------------------------------------

Frame: TypeAlias = pd.DataFrame | DataFrame  # validated on the driver (pandas) or with Spark


@dataclass(frozen=True)
class CheckInputs:
    """The tables a check reads, each as Arrow (small: the driver route) or a Spark DataFrame
    (large), None where the table does not exist. ``checkpoints`` holds the ledger's checkpoint
    events the completion rule needs (the whole ledger when not windowed)."""

    ledger: Relation | None = None
    checkpoints: Relation | None = None
    group_commits: Relation | None = None
    findings: Relation | None = None
    partition_summary: Relation | None = None
    completeness: Relation | None = None
    since: datetime | None = None  # the window's start (checkpoint completion), None: whole tables


# Spark's nullable integers and booleans as pandas' nullable dtypes: numpy's would turn an int
# column with a null into floats (3 -> 3.0 in every observed value).
_PANDAS_TYPES: Final[Mapping[pa.DataType, Any]] = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def as_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow as pandas with nullable integers and booleans (``_PANDAS_TYPES``)."""
    return table.to_pandas(types_mapper=_PANDAS_TYPES.get)


def frame_rules(
    reconcile_run_id: str | None, since: datetime | None, floor: float = 1.0
) -> dict[str, tuple[str, Callable[[Relation], Relation]]]:
    """Suite frame (``SuiteSpec.frame``) -> the CheckInputs field it is made from and its rule;
    ``floor`` is the least completeness of a final window (``completeness.floor``)."""
    run_id = reconcile_run_id
    return {
        "ledger": ("ledger", ledger_frame),
        "checkpoint_completion": ("checkpoints", lambda t: checkpoint_completion(t, since)),
        "group_commits": ("group_commits", as_stored),
        "commits_vs_checkpoints": ("partition_summary", lambda t: commits_vs_checkpoints(t, run_id)),
        "findings": ("findings", as_stored),
        "confirmed_gaps": ("findings", lambda t: confirmed_gaps(t, run_id)),
        "partition_summary": ("partition_summary", lambda t: summary_of_run(t, run_id)),
        "completeness_floor": ("completeness", lambda t: completeness_floor(t, floor)),
    }


def build_frames(
    inputs: CheckInputs, reconcile_run_id: str | None, completeness_floor: float = 1.0
) -> dict[str, Frame | None]:
    """The frame of every suite: pandas for a table read on the driver, Spark for a large one; None
    where its table does not exist."""
    frames: dict[str, Frame | None] = {}
    for name, (field, rule) in frame_rules(reconcile_run_id, inputs.since, completeness_floor).items():
        table = getattr(inputs, field)
        if table is None:
            frames[name] = None
            continue
        out = rule(table)
        frames[name] = out if isinstance(out, DataFrame) else as_pandas(out)
    return frames
