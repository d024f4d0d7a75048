"""The SQL vocabulary of the driver-side audit: literals built from the contract's words, and the
views every rule of ``app.reconcile.ledger.audit`` starts from (completed checkpoints, run ends,
commits, the commits the job claims as its own). DuckDB over the window's Arrow tables; Spark's null order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from app.contracts import vocabulary as vocab
from app.contracts.instants import instant
from app.contracts.vocabulary import (
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_COMMIT_REQUESTED,
    EVENT_COMMIT_SUCCEEDED,
    EVENT_OFFSETS_RESTORED,
    EVENT_RUN_STARTED,
    EVENT_RUN_STOPPED,
)

# What a row of ``claims`` is: a commit the job asked for (or recovered), or one Kafka acknowledged.
CLAIM_REQUESTED: Final = "requested"
CLAIM_ACKNOWLEDGED: Final = "acknowledged"


def sql_ts(value: datetime) -> str:
    """A SQL literal of an instant, in UTC wall time (the registered tables hold UTC wall times)."""
    return f"TIMESTAMP '{value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=' ')}'"


def sql_detail(key: str) -> str:
    """SQL of one key of the ledger's JSON detail (null when the detail is not valid JSON)."""
    return f"detail(detail, '$.{key}')"


def sql_in(values: Sequence[str]) -> str:
    """SQL list of string literals (vocabulary words, which hold no quote)."""
    return ", ".join(f"'{v}'" for v in values)


def sql_secs(seconds: float) -> str:
    return f"to_microseconds({round(seconds * 1_000_000)})"


def naive_utc(table: pa.Table) -> pa.Table:
    """Timestamps as UTC wall time without a zone: DuckDB then compares them without a time-zone
    database, and ``sql_ts`` literals mean the same instants."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            utc = pc.cast(table.column(i), pa.timestamp("us", tz="UTC"))
            table = table.set_column(i, field.name, pc.cast(utc, pa.timestamp("us")))
    return table


# Views over the two registered tables; each later view may use the earlier ones.
VIEWS: Final = f"""
CREATE MACRO detail(d, path) AS CASE WHEN json_valid(d) THEN json_extract_string(d, path) END;

CREATE TEMP TABLE checkpoints AS
WITH completed AS (
    SELECT * FROM ledger WHERE event_type = '{EVENT_CHECKPOINT_COMPLETED}'
), times AS (
    SELECT job_name, run_id, checkpoint_id, min(event_time) AS completed_at,
           count("partition") AS partition_rows
    FROM completed GROUP BY job_name, run_id, checkpoint_id
), parts AS (
    SELECT job_name, run_id, checkpoint_id, group_id, engine, topic, "partition", "offset", raw_offset
    FROM completed WHERE "partition" IS NOT NULL
    UNION ALL
    -- A completion recorded without partition rows takes its offsets from the snapshot.
    SELECT s.job_name, s.run_id, s.checkpoint_id, s.group_id, s.engine, s.topic, s."partition",
           s."offset", s.raw_offset
    FROM ledger s JOIN times t
      ON s.job_name = t.job_name AND s.run_id = t.run_id AND s.checkpoint_id = t.checkpoint_id
    WHERE t.partition_rows = 0 AND s.event_type = '{EVENT_CHECKPOINT_SNAPSHOT}'
      AND s."partition" IS NOT NULL
), per_partition AS (
    SELECT job_name, run_id, checkpoint_id, topic, "partition", max(group_id) AS group_id,
           max(engine) AS engine, max("offset") AS "offset", max(raw_offset) AS raw_offset
    FROM parts GROUP BY job_name, run_id, checkpoint_id, topic, "partition"
)
SELECT p.*, t.completed_at
FROM per_partition p JOIN times t
  ON p.job_name = t.job_name AND p.run_id = t.run_id AND p.checkpoint_id = t.checkpoint_id;

-- Every run with how it ended: its RUN_STOPPED, else the job's next start (it died before), else
-- open (still running, or dead and never followed). Recovered events carry the dead run's id and
-- the time Spark wrote the checkpoint file, so last_event_at is the run's own last sign of life.
CREATE TEMP VIEW run_ends AS
WITH starts AS (
    SELECT job_name, run_id, min(event_time) AS started_at, max(group_id) AS group_id
    FROM ledger WHERE event_type = '{EVENT_RUN_STARTED}' GROUP BY job_name, run_id
), stops AS (
    SELECT job_name, run_id, max(event_time) AS stopped_at
    FROM ledger WHERE event_type = '{EVENT_RUN_STOPPED}' GROUP BY job_name, run_id
), last_events AS (
    SELECT job_name, run_id, max(event_time) AS last_event_at,
           arg_max_null(event_type, {{'t': event_time, 'c': checkpoint_id}}) AS last_event_type,
           max(checkpoint_id) AS last_checkpoint_id
    FROM ledger GROUP BY job_name, run_id
)
SELECT s.job_name, s.run_id, s.group_id, s.started_at, p.stopped_at,
       lead(s.run_id) OVER w AS next_run_id, lead(s.started_at) OVER w AS next_started_at,
       coalesce(p.stopped_at, lead(s.started_at) OVER w) AS ended_at,
       e.last_event_at, e.last_event_type, e.last_checkpoint_id
FROM starts s
LEFT JOIN stops p ON s.job_name = p.job_name AND s.run_id = p.run_id
LEFT JOIN last_events e ON s.job_name = e.job_name AND s.run_id = e.run_id
WINDOW w AS (PARTITION BY s.job_name ORDER BY s.started_at, s.run_id);

CREATE TEMP VIEW runs AS
SELECT job_name, run_id, started_at, group_id,
       lag(run_id) OVER w AS previous_run_id,
       lag(started_at) OVER w AS previous_started_at,
       lag(stopped_at) OVER w AS previous_stopped_at
FROM run_ends
WINDOW w AS (PARTITION BY job_name ORDER BY started_at, run_id);

-- The spans of a run's completed checkpoints the ledger holds no offsets of (a Flink sidecar names
-- them in missed_checkpoints of a later completion of the run), per partition the naming completion
-- holds: from the run's recorded completion before them, else where the run started (its
-- OFFSETS_RESTORED), to its recorded completion after them, in offsets (normalized) and times.
-- A source's position never moves back within a run, so each missed checkpoint held an offset in
-- between, and completed (then committed it) in between. Without a lower bound (no earlier
-- completion, no start offsets) there is no span.
CREATE TEMP VIEW missed_spans AS
WITH named AS (
    SELECT DISTINCT job_name, run_id, checkpoint_id AS named_by, unnest(TRY_CAST(
               json_extract({sql_detail(vocab.DETAIL_MISSED_CHECKPOINTS)}, '$[*].id') AS BIGINT[]))
               AS missed_id
    FROM ledger
    WHERE event_type = '{EVENT_CHECKPOINT_COMPLETED}'
      AND {sql_detail(vocab.DETAIL_MISSED_CHECKPOINTS)} IS NOT NULL
), held AS (
    SELECT * FROM checkpoints WHERE "offset" IS NOT NULL
), per_partition AS (
    SELECT DISTINCT n.job_name, n.run_id, n.missed_id, k.group_id, k.topic, k."partition"
    FROM named n JOIN held k
      ON n.job_name = k.job_name AND n.run_id = k.run_id AND n.named_by = k.checkpoint_id
    -- a missed one the ledger holds after all (flink-import adds it) is no span: its offsets bound others
    WHERE n.missed_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM held h WHERE h.job_name = n.job_name AND h.run_id = n.run_id
          AND h.checkpoint_id = n.missed_id AND h.topic = k.topic AND h."partition" = k."partition")
), bounded AS (
    SELECT p.*, l.checkpoint_id AS from_checkpoint, l."offset" AS previous_offset,
           l.completed_at AS previous_at,
           u.checkpoint_id AS to_checkpoint, u."offset" AS to_offset, u.completed_at AS to_time
    FROM per_partition p
    ASOF LEFT JOIN held l
      ON p.job_name = l.job_name AND p.run_id = l.run_id AND p.topic = l.topic
     AND p."partition" = l."partition" AND p.missed_id > l.checkpoint_id
    ASOF JOIN held u
      ON p.job_name = u.job_name AND p.run_id = u.run_id AND p.topic = u.topic
     AND p."partition" = u."partition" AND p.missed_id < u.checkpoint_id
), started AS (
    SELECT job_name, run_id, topic, "partition", min("offset") AS start_offset, min(event_time) AS started_at
    FROM ledger
    WHERE event_type = '{EVENT_OFFSETS_RESTORED}' AND "offset" IS NOT NULL AND "partition" IS NOT NULL
    GROUP BY job_name, run_id, topic, "partition"
)
SELECT b.job_name, b.run_id, b.group_id, b.topic, b."partition", list_sort(list(b.missed_id)) AS missed_ids,
       b.from_checkpoint, coalesce(b.previous_offset, r.start_offset) AS from_offset,
       coalesce(b.previous_at, r.started_at) AS from_time, b.to_checkpoint, b.to_offset, b.to_time
FROM bounded b
LEFT JOIN started r
  ON b.previous_offset IS NULL AND b.job_name = r.job_name AND b.run_id = r.run_id
 AND b.topic = r.topic AND b."partition" = r."partition"
WHERE coalesce(b.previous_offset, r.start_offset) IS NOT NULL
GROUP BY ALL;

CREATE TEMP VIEW job_groups AS
SELECT group_id, min(job_name) AS job_name FROM ledger WHERE group_id IS NOT NULL GROUP BY group_id;

-- previous_offset: the partition's offset before this record, in __consumer_offsets order (none after
-- a tombstone, which resets the history): a commit below it moved the group backwards.
CREATE TEMP TABLE commits AS
WITH ordered AS (
    SELECT *, lag(committed_offset) OVER w AS lagged_offset, lag(record_kind) OVER w AS lagged_kind
    FROM gc WHERE record_kind IN ({sql_in(vocab.RECORD_KINDS)})
    WINDOW w AS (PARTITION BY group_id, topic, "partition"
                 ORDER BY coalesce(commit_time, log_time) ASC NULLS FIRST, log_offset ASC NULLS FIRST)
)
SELECT * EXCLUDE (lagged_offset, lagged_kind),
       CASE WHEN lagged_kind != '{vocab.RECORD_TOMBSTONE}' THEN lagged_offset END AS previous_offset,
       row_number() OVER () AS commit_row, coalesce(commit_time, log_time) AS effective_time
FROM ordered WHERE record_kind IN ({sql_in((vocab.RECORD_COMMIT, vocab.RECORD_SNAPSHOT))})
  AND committed_offset IS NOT NULL;

-- What the job says it sent to the group, per partition: its COMMIT_REQUESTED rows, the completions
-- it recovered after a crash (the dead process may have sent their commit) and what Kafka
-- acknowledged to it (COMMIT_SUCCEEDED), each with the checkpoint's normalized offset and the time
-- the run ended: its RUN_STOPPED or, when it died without one, the job's next start. A request and
-- its acknowledgement share their attempt (one OffsetCommit call); a recovered completion has none.
CREATE TEMP TABLE claims AS
WITH sent AS (
    SELECT job_name, run_id, checkpoint_id, group_id, engine, topic, "partition",
           CASE WHEN event_type = '{EVENT_COMMIT_SUCCEEDED}' THEN '{CLAIM_ACKNOWLEDGED}'
                ELSE '{CLAIM_REQUESTED}' END AS claim,
           event_type = '{EVENT_CHECKPOINT_COMPLETED}' AS recovered,
           CASE WHEN event_type != '{EVENT_CHECKPOINT_COMPLETED}' THEN {sql_detail(vocab.DETAIL_ATTEMPT)}
                END AS attempt,
           "offset" AS requested_offset, raw_offset AS requested_raw, event_time AS requested_at
    FROM ledger
    WHERE "partition" IS NOT NULL AND "offset" IS NOT NULL AND (
        event_type IN ('{EVENT_COMMIT_REQUESTED}', '{EVENT_COMMIT_SUCCEEDED}')
        OR (event_type = '{EVENT_CHECKPOINT_COMPLETED}'
            AND coalesce({sql_detail(vocab.DETAIL_RECOVERED)}, 'false') = 'true'))
), stopped AS (
    SELECT job_name, run_id, max(event_time) AS stopped_at
    FROM ledger WHERE event_type = '{EVENT_RUN_STOPPED}' GROUP BY job_name, run_id
), started AS (
    SELECT job_name, run_id, min(event_time) AS started_at
    FROM ledger WHERE event_type = '{EVENT_RUN_STARTED}' GROUP BY job_name, run_id
), ends AS (
    SELECT coalesce(a.job_name, b.job_name) AS job_name, coalesce(a.run_id, b.run_id) AS run_id,
           coalesce(b.stopped_at, lead(a.started_at) OVER (
               PARTITION BY a.job_name ORDER BY a.started_at, a.run_id)) AS run_stopped_at
    FROM started a FULL JOIN stopped b ON a.job_name = b.job_name AND a.run_id = b.run_id
)
SELECT q.*, c."offset" AS checkpoint_offset, c.raw_offset AS checkpoint_raw, e.run_stopped_at
FROM sent q
LEFT JOIN checkpoints c
  ON q.job_name = c.job_name AND q.run_id = c.run_id AND q.checkpoint_id = c.checkpoint_id
 AND q.topic = c.topic AND q."partition" = c."partition"
LEFT JOIN ends e ON q.job_name = e.job_name AND q.run_id = e.run_id;
"""


IDENTITY_SQL: Final = (
    "concat_ws('|', coalesce(CAST(log_partition AS VARCHAR), '-'), "
    "coalesce(CAST(log_offset AS VARCHAR), '-'), CAST(committed_offset AS VARCHAR))"
)


def aware_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DuckDB's rows with their UTC wall times back as instants."""
    return [{k: instant(v) for k, v in r.items()} for r in rows]


def to_int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def pick(row: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {n: row[n] for n in names}
