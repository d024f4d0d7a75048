"""Ledger- and commit-derived findings, computed on the driver in an in-process DuckDB.

The ledger window and the group's commits are small next to the sink (one row per checkpoint and
partition, about 800K rows for a 1B-row sink), but answering the seven questions below in Spark
takes some 80 short stages: 10-40 s of scheduling for a few hundred milliseconds of work, which
dominated a nightly run. So the I/O module collects both frames once (Arrow), and the joins,
windows and aggregates below run in DuckDB, whose SQL keeps the semantics of the Spark versions
they replace: the same null ordering (nulls first ascending, last descending), the same
null-rejecting equi-joins, ``get_json_object`` as ``detail()`` (null on malformed JSON), and the
same finding identities, so finding ids are unchanged.

Finding types (shared/DESIGN.md section 5): LEDGER_INCONSISTENT, COMMIT_FAILURE, FOREIGN_COMMIT,
COMMIT_MISMATCH, COMMIT_REGRESSION, SKIPPED_COMMIT, COMMITTED_AHEAD. Each function returns rows in
FINDING_CORE form (plain dicts); ``finalize`` adds the id, the run and the time of detection.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from app import reconcile as rc
from app.committer import ERROR_OUTCOME_UNKNOWN
from app.schemas import (
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_COMMIT_FAILED,
    EVENT_COMMIT_REQUESTED,
    EVENT_COMMIT_SKIPPED,
    EVENT_COMMIT_SUCCEEDED,
    EVENT_RUN_STARTED,
    EVENT_RUN_STOPPED,
    FINDINGS_SCHEMA,
)

# The null sentinel and separator of rc.finding_id, so ids computed here equal Spark's.
_NULL: Final = "\u2400"
_SEP: Final = "\u241f"

# Views over the two registered tables; each later view may use the earlier ones.
_VIEWS: Final = f"""
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

CREATE TEMP VIEW runs AS
WITH starts AS (
    SELECT job_name, run_id, min(event_time) AS started_at, max(group_id) AS group_id
    FROM ledger WHERE event_type = '{EVENT_RUN_STARTED}' GROUP BY job_name, run_id
), stops AS (
    SELECT job_name, run_id, max(event_time) AS stopped_at
    FROM ledger WHERE event_type = '{EVENT_RUN_STOPPED}' GROUP BY job_name, run_id
)
SELECT s.job_name, s.run_id, s.started_at, s.group_id,
       lag(s.run_id) OVER w AS previous_run_id,
       lag(s.started_at) OVER w AS previous_started_at,
       lag(p.stopped_at) OVER w AS previous_stopped_at
FROM starts s LEFT JOIN stops p ON s.job_name = p.job_name AND s.run_id = p.run_id
WINDOW w AS (PARTITION BY s.job_name ORDER BY s.started_at, s.run_id);

CREATE TEMP VIEW job_groups AS
SELECT group_id, min(job_name) AS job_name FROM ledger WHERE group_id IS NOT NULL GROUP BY group_id;

CREATE TEMP TABLE commits AS
SELECT *, row_number() OVER () AS commit_row, coalesce(commit_time, log_time) AS effective_time
FROM gc WHERE record_kind IN ('commit', 'snapshot') AND committed_offset IS NOT NULL;

-- COMMIT_REQUESTED per partition, and completions the job recovered after a crash (the dead
-- process may have sent their commit), with the checkpoint's normalized offset and the time the
-- run ended: its RUN_STOPPED or, when it died without one, the job's next start.
CREATE TEMP TABLE requests AS
WITH asked AS (
    SELECT job_name, run_id, checkpoint_id, group_id, engine, topic, "partition",
           "offset" AS requested_offset, event_time AS requested_at
    FROM ledger
    WHERE "partition" IS NOT NULL AND (
        event_type = '{EVENT_COMMIT_REQUESTED}'
        OR (event_type = '{EVENT_CHECKPOINT_COMPLETED}'
            AND coalesce(detail(detail, '$.recovered'), 'false') = 'true'))
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
FROM asked q
LEFT JOIN checkpoints c
  ON q.job_name = c.job_name AND q.run_id = c.run_id AND q.checkpoint_id = c.checkpoint_id
 AND q.topic = c.topic AND q."partition" = c."partition"
LEFT JOIN ends e ON q.job_name = e.job_name AND q.run_id = e.run_id;
"""


def _ts(value: datetime) -> str:
    """A SQL literal of an instant, in UTC wall time (the registered tables hold UTC wall times)."""
    return f"TIMESTAMP '{value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=' ')}'"


def _secs(seconds: float) -> str:
    return f"to_microseconds({round(seconds * 1_000_000)})"


def _naive_utc(table: pa.Table) -> pa.Table:
    """Timestamps as UTC wall time without a zone: DuckDB then compares them without a time-zone
    database, and ``_ts`` literals mean the same instants."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            utc = pc.cast(table.column(i), pa.timestamp("us", tz="UTC"))
            table = table.set_column(i, field.name, pc.cast(utc, pa.timestamp("us")))
    return table


# Skip reasons of the committer, folded into the three classes DESIGN section 5 names.
_SUPERSEDED_REASONS: Final = ("superseded_in_flight", "pending_evicted", "unknown_checkpoint")

_IDENTITY: Final = (
    "concat_ws('|', coalesce(CAST(log_partition AS VARCHAR), '-'), "
    "coalesce(CAST(log_offset AS VARCHAR), '-'), CAST(committed_offset AS VARCHAR))"
)


class LedgerAudit:
    """An in-process database over one window's ledger and group commits (Arrow tables with the
    ledger and group_commits contract columns)."""

    def __init__(
        self, ledger: pa.Table, group_commits: pa.Table, window: rc.AuditWindow, rules: rc.MatchRules
    ):
        self.window = window
        self.rules = rules
        self._db = duckdb.connect(":memory:")
        # Spark's order of nulls, which the ranking below relies on.
        self._db.execute("SET default_null_order = 'nulls_first_on_asc_last_on_desc'")
        self._has_matched = False
        self._db.register("ledger", _naive_utc(ledger))
        self._db.register("gc", _naive_utc(group_commits))
        self._db.execute(_VIEWS)

    def close(self) -> None:
        self._db.close()

    # --- plumbing --------------------------------------------------------------------------------

    def rows(self, sql: str) -> list[dict[str, Any]]:
        cursor = self._db.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]

    def _within(self, expr: str) -> str:
        """SQL of AuditWindow.contains: [since, until), null outside."""
        inside = f"({expr}) < {_ts(self.window.until)}"
        return inside if self.window.since is None else f"{inside} AND ({expr}) >= {_ts(self.window.since)}"

    def horizon(self) -> datetime | None:
        """How far group_commits has been ingested: the newest log (or commit) time."""
        row = self._db.execute("SELECT max(coalesce(log_time, commit_time)) FROM gc").fetchone()
        return None if row is None or row[0] is None else _aware(row[0])

    def groups(self) -> list[str]:
        return [r["group_id"] for r in self.rows("SELECT group_id FROM job_groups ORDER BY group_id")]

    def all_findings(self) -> list[dict[str, Any]]:
        """Every ledger- and commit-derived finding of the window, in FINDING_CORE form."""
        return [
            *self.ledger_inconsistencies(),
            *self.commit_failures(),
            *self.foreign_commits(),
            *self.commit_mismatches(),
            *self.commit_regressions(),
            *self.skipped_commits(self.horizon()),
            *self.committed_ahead(),
        ]

    # --- LEDGER_INCONSISTENT -----------------------------------------------------------------------

    def ledger_inconsistencies(self) -> list[dict[str, Any]]:
        """Completed without snapshot; snapshot offsets moving backwards in a run; a run that
        started while the previous one never stopped."""
        no_snapshot = self.rows(
            f"""
            WITH completions AS (
                SELECT job_name, run_id, checkpoint_id, min(event_time) AS completed_at,
                       max(group_id) AS group_id
                FROM ledger WHERE event_type = '{EVENT_CHECKPOINT_COMPLETED}'
                GROUP BY job_name, run_id, checkpoint_id
            )
            SELECT * FROM completions c
            WHERE {self._within("c.completed_at")} AND NOT EXISTS (
                SELECT 1 FROM ledger s WHERE s.event_type = '{EVENT_CHECKPOINT_SNAPSHOT}'
                  AND s.job_name = c.job_name AND s.run_id = c.run_id
                  AND s.checkpoint_id = c.checkpoint_id)
            """
        )
        backwards = self.rows(
            f"""
            WITH stepped AS (
                SELECT *, lag("offset") OVER w AS prev_offset, lag(checkpoint_id) OVER w AS prev_checkpoint
                FROM ledger
                WHERE event_type = '{EVENT_CHECKPOINT_SNAPSHOT}' AND "partition" IS NOT NULL
                  AND "offset" IS NOT NULL
                WINDOW w AS (PARTITION BY job_name, run_id, topic, "partition"
                             ORDER BY checkpoint_id, event_time)
            )
            SELECT * FROM stepped WHERE "offset" < prev_offset AND {self._within("event_time")}
            """
        )
        unstopped = self.rows(
            f"""
            SELECT * FROM runs WHERE previous_run_id IS NOT NULL AND previous_stopped_at IS NULL
              AND {self._within("started_at")}
            """
        )
        kind = "completed_without_snapshot"
        out = [
            _core(
                rc.LEDGER_INCONSISTENT,
                rc.WARN,
                rc.OPEN,
                r,
                {"kind": kind, "completed_at": r["completed_at"]},
                identity=kind,
                cols=("job_name", "group_id", "run_id", "checkpoint_id"),
            )
            for r in no_snapshot
        ]
        kind = "offsets_backwards_in_run"
        out += [
            _core(
                rc.LEDGER_INCONSISTENT,
                rc.WARN,
                rc.OPEN,
                r,
                {
                    "kind": kind,
                    "previous_checkpoint_id": r["prev_checkpoint"],
                    "previous_offset": r["prev_offset"],
                    "offset": r["offset"],
                    "event_time": r["event_time"],
                },
                identity=kind,
                offset_start=r["offset"],
                offset_end=r["prev_offset"],
                record_count=r["prev_offset"] - r["offset"],
            )
            for r in backwards
        ]
        kind = "previous_run_not_stopped"
        out += [
            _core(
                rc.LEDGER_INCONSISTENT,
                rc.WARN,
                rc.OPEN,
                r,
                {
                    "kind": kind,
                    "previous_run_id": r["previous_run_id"],
                    "previous_started_at": r["previous_started_at"],
                    "started_at": r["started_at"],
                },
                identity=kind,
                cols=("job_name", "group_id", "run_id"),
            )
            for r in unstopped
        ]
        return out

    # --- COMMIT_FAILURE ----------------------------------------------------------------------------

    def commit_failures(self) -> list[dict[str, Any]]:
        """COMMIT_FAILED events grouped by run, partition, Kafka error and day (the nightly unit)."""
        grouped = self.rows(
            f"""
            WITH failed AS (
                SELECT *, coalesce(detail(detail, '$.error'), 'UNKNOWN') AS error
                FROM ledger
                WHERE event_type = '{EVENT_COMMIT_FAILED}' AND {self._within("event_time")}
            )
            SELECT job_name, run_id, group_id, topic, "partition", error, event_date,
                   count(*) AS failures, min(event_time) AS first_failure, max(event_time) AS last_failure,
                   coalesce(list_sort(list_distinct(list(checkpoint_id)))[1:20], []) AS checkpoint_ids,
                   max(detail(detail, '$.retriable')) AS retriable,
                   max(detail(detail, '$.message')) AS message,
                   min("offset") AS min_offset, max("offset") AS max_offset
            FROM failed
            GROUP BY job_name, run_id, group_id, topic, "partition", error, event_date
            """
        )
        # OUTCOME_UNKNOWN is what a crash leaves for a commit in flight: not a failure Kafka
        # reported. Whether those offsets reached Kafka is judged by the skipped-commit check
        # against __consumer_offsets, so here it is only information.
        return [
            _core(
                rc.COMMIT_FAILURE,
                rc.INFO if r["error"] == ERROR_OUTCOME_UNKNOWN else rc.WARN,
                rc.OPEN,
                r,
                {
                    "error": r["error"],
                    "retriable": r["retriable"],
                    "message": r["message"],
                    "first_failure": r["first_failure"],
                    "last_failure": r["last_failure"],
                    "checkpoint_ids": r["checkpoint_ids"],
                },
                identity="|".join(str(v) for v in (r["error"], r["event_date"]) if v is not None),
                offset_start=r["min_offset"],
                offset_end=r["max_offset"],
                record_count=r["failures"],
            )
            for r in grouped
        ]

    # --- commit matching ---------------------------------------------------------------------------

    def _ensure_matched(self) -> None:
        """A temp table ``matched``: each effective group commit with the request that explains it.

        ``match_kind`` 'exact': a request sent this very offset within the window before the
        commit (an Admin API snapshot, which has no history, is explained by one at any earlier
        time); 'time': a request of the same partition within the window but with another offset,
        by a run that had not stopped yet (after it stopped, such a commit is foreign); null: none.
        Of several candidates the latest request wins.
        """
        skew, window = _secs(self.rules.clock_skew_s), _secs(self.rules.commit_match_window_s)
        timed = f"r.requested_at - {skew} <= c.commit_time AND c.commit_time <= r.requested_at + {window}"
        snapshot_ok = (
            "c.record_kind = 'snapshot' "
            f"AND (c.commit_time IS NULL OR r.requested_at <= c.commit_time + {skew})"
        )
        same_tp = 'c.group_id = r.group_id AND c.topic = r.topic AND c."partition" = r."partition"'
        ranked = "row_number() OVER (PARTITION BY c.commit_row ORDER BY r.requested_at DESC, r.run_id)"
        request_cols = (
            "r.job_name, r.run_id, r.checkpoint_id, r.requested_offset, r.checkpoint_offset, r.requested_at"
        )
        if self._has_matched:
            return
        self._db.execute(
            f"""
            CREATE TEMP TABLE matched AS
            WITH exact AS (
                SELECT c.*, 'exact' AS match_kind, {request_cols}, {ranked} AS rank
                FROM commits c JOIN requests r
                  ON {same_tp} AND c.committed_offset = r.requested_offset
                 AND (({timed}) OR ({snapshot_ok}))
                QUALIFY rank = 1
            ), leftover AS (
                SELECT * FROM commits c WHERE c.commit_row NOT IN (SELECT commit_row FROM exact)
            ), timed AS (
                SELECT c.*, 'time' AS match_kind, {request_cols}, {ranked} AS rank
                FROM leftover c JOIN requests r
                  ON {same_tp} AND ({timed})
                 AND (r.run_stopped_at IS NULL OR c.commit_time <= r.run_stopped_at + {skew})
                QUALIFY rank = 1
            )
            SELECT * EXCLUDE (rank) FROM exact
            UNION ALL BY NAME SELECT * EXCLUDE (rank) FROM timed
            UNION ALL BY NAME
            SELECT c.*, NULL AS match_kind, NULL AS job_name, NULL AS run_id, NULL::BIGINT AS checkpoint_id,
                   NULL::BIGINT AS requested_offset, NULL::BIGINT AS checkpoint_offset,
                   NULL::TIMESTAMP AS requested_at
            FROM leftover c WHERE c.commit_row NOT IN (SELECT commit_row FROM timed)
            """
        )
        self._has_matched = True

    def matched(self) -> list[dict[str, Any]]:
        """The commit matching itself, for inspection and tests."""
        self._ensure_matched()
        return self.rows("SELECT * EXCLUDE (commit_row, effective_time) FROM matched")

    def foreign_commits(self) -> list[dict[str, Any]]:
        """Group commits that no ledger request explains (reset tool, another consumer on the group)."""
        self._ensure_matched()
        foreign = self.rows(
            f"""
            SELECT m.* EXCLUDE (job_name), g.job_name, {_IDENTITY} AS identity
            FROM matched m LEFT JOIN job_groups g ON m.group_id = g.group_id
            WHERE m.match_kind IS NULL AND {self._within("m.effective_time")}
            """
        )
        return [
            _core(
                rc.FOREIGN_COMMIT,
                rc.ERROR,
                rc.OPEN,
                r,
                _pick(
                    r,
                    "committed_offset",
                    "commit_time",
                    "record_kind",
                    "metadata",
                    "log_partition",
                    "log_offset",
                ),
                identity=r["identity"],
                cols=("job_name", "group_id", "topic", "partition"),
                offset_start=r["committed_offset"],
            )
            for r in foreign
        ]

    def commit_mismatches(self) -> list[dict[str, Any]]:
        """A commit matched to a checkpoint whose normalized offset differs from the committed one.

        Either the committer sent the request's offset but that differs from the checkpoint's
        normalized offset (an engine-dialect bug: e.g. Flink legacy's +1 forgotten), or the commit
        was matched only by time to a request with another offset.
        """
        self._ensure_matched()
        bad = self.rows(
            f"""
            SELECT *, coalesce(checkpoint_offset, requested_offset) AS expected, {_IDENTITY} AS identity
            FROM matched
            WHERE match_kind IS NOT NULL AND {self._within("effective_time")}
              AND committed_offset != coalesce(checkpoint_offset, requested_offset)
            """
        )
        return [
            _core(
                rc.COMMIT_MISMATCH,
                rc.ERROR,
                rc.OPEN,
                r,
                {
                    "match": r["match_kind"],
                    **_pick(r, "committed_offset", "checkpoint_offset", "requested_offset"),
                    "difference": r["committed_offset"] - r["expected"],
                    **_pick(r, "commit_time", "requested_at"),
                },
                identity=r["identity"],
                offset_start=min(r["committed_offset"], r["expected"]),
                offset_end=max(r["committed_offset"], r["expected"]),
                record_count=abs(r["committed_offset"] - r["expected"]),
            )
            for r in bad
        ]

    # --- COMMIT_REGRESSION -------------------------------------------------------------------------

    def commit_regressions(self) -> list[dict[str, Any]]:
        """The committed offset of a group partition moving backwards, in __consumer_offsets order.

        A tombstone (offset deleted) resets the history: the next commit starts afresh.
        """
        stepped = self.rows(
            f"""
            WITH ordered AS (
                SELECT *, lag(committed_offset) OVER w AS prev_offset, lag(record_kind) OVER w AS prev_kind,
                       lag(commit_time) OVER w AS prev_time
                FROM gc WHERE record_kind IN ('commit', 'snapshot', 'tombstone')
                WINDOW w AS (PARTITION BY group_id, topic, "partition"
                             ORDER BY coalesce(commit_time, log_time) ASC NULLS FIRST,
                                      log_offset ASC NULLS FIRST)
            )
            SELECT o.*, g.job_name, {_IDENTITY} AS identity
            FROM ordered o LEFT JOIN job_groups g ON o.group_id = g.group_id
            WHERE record_kind != 'tombstone' AND prev_kind != 'tombstone' AND committed_offset < prev_offset
              AND {self._within("coalesce(commit_time, log_time)")}
            """
        )
        return [
            _core(
                rc.COMMIT_REGRESSION,
                rc.ERROR,
                rc.OPEN,
                r,
                {
                    "previous_offset": r["prev_offset"],
                    "previous_commit_time": r["prev_time"],
                    **_pick(r, "committed_offset", "commit_time", "log_partition", "log_offset"),
                },
                identity=r["identity"],
                cols=("job_name", "group_id", "topic", "partition"),
                offset_start=r["committed_offset"],
                offset_end=r["prev_offset"],
                record_count=r["prev_offset"] - r["committed_offset"],
            )
            for r in stepped
        ]

    # --- SKIPPED_COMMIT ----------------------------------------------------------------------------

    def skipped_commits(self, horizon: datetime | None) -> list[dict[str, Any]]:
        """Completed checkpoints whose offsets never reached __consumer_offsets, with the reason.

        Reached means: a group commit of that very offset at or after the completion (minus clock
        skew). ``horizon`` is how far group_commits has been ingested; checkpoints completed later
        than ``horizon`` minus the match window are not judged yet (their commit may simply not be
        ingested). Superseded and covered by a later commit of a higher offset is benign (info);
        everything else is a warning.
        """
        if horizon is None:
            return []
        skew, window = _secs(self.rules.clock_skew_s), _secs(self.rules.commit_match_window_s)
        same_tp = (
            'c.group_id = k.group_id AND c.topic = k.topic AND c."partition" = k."partition" '
            f"AND c.effective_time >= k.completed_at - {skew}"
        )
        key = "job_name, run_id, checkpoint_id"
        superseded = ", ".join(f"'{r}'" for r in _SUPERSEDED_REASONS)
        rows = self.rows(
            f"""
            WITH unreached AS (
                SELECT * FROM checkpoints k
                WHERE "offset" IS NOT NULL AND {self._within("k.completed_at")}
                  AND k.completed_at + {window} <= {_ts(horizon)}
                  AND NOT EXISTS (SELECT 1 FROM commits c WHERE {same_tp} AND c.committed_offset = k."offset")
            ), covering AS (
                SELECT k.job_name, k.run_id, k.checkpoint_id, k.topic, k."partition",
                       min(c.effective_time) AS covered_at,
                       arg_min(c.committed_offset, c.effective_time) AS covered_by_offset
                FROM unreached k JOIN commits c ON {same_tp} AND c.committed_offset >= k."offset"
                GROUP BY k.job_name, k.run_id, k.checkpoint_id, k.topic, k."partition"
            ), events AS (
                SELECT * FROM ledger WHERE checkpoint_id IS NOT NULL
            ), skipped AS (
                SELECT {key}, max(detail(detail, '$.reason')) AS skip_reason,
                       max(detail(detail, '$.superseded_by')) AS superseded_by
                FROM events WHERE event_type = '{EVENT_COMMIT_SKIPPED}' GROUP BY {key}
            ), failed AS (
                SELECT {key}, topic, "partition", max(detail(detail, '$.error')) AS error
                FROM events WHERE event_type = '{EVENT_COMMIT_FAILED}' GROUP BY {key}, topic, "partition"
            ), outcome AS (
                SELECT {key}, topic, "partition",
                       bool_or(event_type = '{EVENT_COMMIT_REQUESTED}') AS requested,
                       bool_or(event_type = '{EVENT_COMMIT_SUCCEEDED}') AS acknowledged
                FROM events WHERE event_type IN ('{EVENT_COMMIT_REQUESTED}', '{EVENT_COMMIT_SUCCEEDED}')
                GROUP BY {key}, topic, "partition"
            ), discarded AS (
                -- Later completions list the pending checkpoints they dropped; such a checkpoint
                -- that still completed was superseded even when no COMMIT_SKIPPED row names it.
                SELECT job_name, run_id, checkpoint_id, min(discarded_by) AS discarded_by FROM (
                    SELECT job_name, run_id, checkpoint_id AS discarded_by,
                           unnest(TRY_CAST(detail(detail, '$.discarded_pending') AS BIGINT[]))
                               AS checkpoint_id
                    FROM events WHERE event_type = '{EVENT_CHECKPOINT_COMPLETED}'
                ) GROUP BY job_name, run_id, checkpoint_id
            ), joined AS (
                SELECT u.*, s.skip_reason, s.superseded_by, d.discarded_by, f.error, o.requested,
                       o.acknowledged, v.covered_at, v.covered_by_offset
                FROM unreached u
                LEFT JOIN skipped s
                  ON u.job_name = s.job_name AND u.run_id = s.run_id AND u.checkpoint_id = s.checkpoint_id
                LEFT JOIN discarded d
                  ON u.job_name = d.job_name AND u.run_id = d.run_id AND u.checkpoint_id = d.checkpoint_id
                LEFT JOIN failed f
                  ON u.job_name = f.job_name AND u.run_id = f.run_id AND u.checkpoint_id = f.checkpoint_id
                 AND u.topic = f.topic AND u."partition" = f."partition"
                LEFT JOIN outcome o
                  ON u.job_name = o.job_name AND u.run_id = o.run_id AND u.checkpoint_id = o.checkpoint_id
                 AND u.topic = o.topic AND u."partition" = o."partition"
                LEFT JOIN covering v
                  ON u.job_name = v.job_name AND u.run_id = v.run_id AND u.checkpoint_id = v.checkpoint_id
                 AND u.topic = v.topic AND u."partition" = v."partition"
            )
            SELECT *, CASE
                WHEN error IS NOT NULL THEN 'failed'
                WHEN skip_reason IN ({superseded}) OR discarded_by IS NOT NULL THEN 'superseded'
                WHEN skip_reason = 'commit_disabled' THEN 'commit_disabled'
                WHEN acknowledged THEN 'acknowledged_not_found'
                ELSE 'never_attempted' END AS reason
            FROM joined
            """
        )
        out = []
        for r in rows:
            benign = r["reason"] == "superseded" and r["covered_at"] is not None
            superseded_by = _to_int(r["superseded_by"])
            out.append(
                _core(
                    rc.SKIPPED_COMMIT,
                    rc.INFO if benign or r["reason"] == "commit_disabled" else rc.WARN,
                    rc.BENIGN if benign else rc.OPEN,
                    r,
                    {
                        "reason": r["reason"],
                        "skip_reason": r["skip_reason"],
                        "superseded_by": superseded_by if superseded_by is not None else r["discarded_by"],
                        "error": r["error"],
                        "requested": bool(r["requested"]),
                        "acknowledged": bool(r["acknowledged"]),
                        "completed_at": r["completed_at"],
                        "covered_by_offset": r["covered_by_offset"],
                        "covered_at": r["covered_at"],
                    },
                    offset_start=r["offset"],
                )
            )
        return out

    # --- COMMITTED_AHEAD ---------------------------------------------------------------------------

    def committed_ahead(self) -> list[dict[str, Any]]:
        """The group's latest committed offset beyond every checkpoint completed before ``until``."""
        until = _ts(self.window.until)
        ahead = self.rows(
            f"""
            WITH done AS (
                SELECT group_id, topic, "partition", max("offset") AS max_completed,
                       arg_max(checkpoint_id, "offset") AS max_checkpoint,
                       arg_max(run_id, "offset") AS max_run
                FROM checkpoints WHERE completed_at < {until} AND "offset" IS NOT NULL
                GROUP BY group_id, topic, "partition"
            ), latest AS (
                SELECT * FROM commits WHERE effective_time < {until}
                QUALIFY row_number() OVER (
                    PARTITION BY group_id, topic, "partition"
                    ORDER BY effective_time DESC NULLS LAST, log_offset DESC NULLS LAST) = 1
            )
            SELECT l.*, d.max_completed, d.max_checkpoint, d.max_run, g.job_name
            FROM latest l
            JOIN done d ON l.group_id = d.group_id AND l.topic = d.topic AND l."partition" = d."partition"
            LEFT JOIN job_groups g ON l.group_id = g.group_id
            WHERE l.committed_offset > d.max_completed
            """
        )
        return [
            _core(
                rc.COMMITTED_AHEAD,
                rc.CRITICAL,
                rc.OPEN,
                r,
                {
                    **_pick(r, "committed_offset", "commit_time"),
                    "latest_completed_offset": r["max_completed"],
                    "latest_completed_checkpoint": r["max_checkpoint"],
                    "latest_completed_run": r["max_run"],
                    "would_skip": r["committed_offset"] - r["max_completed"],
                },
                identity=str(r["committed_offset"]),
                cols=("job_name", "group_id", "topic", "partition"),
                offset_start=r["max_completed"],
                offset_end=r["committed_offset"],
                record_count=r["committed_offset"] - r["max_completed"],
            )
            for r in ahead
        ]


def ledger_groups(ledger: pa.Table) -> list[str]:
    """The consumer groups the ledger's jobs commit to."""
    return sorted(g for g in pc.unique(ledger.column("group_id")).to_pylist() if g is not None)


# --- rows -------------------------------------------------------------------------------------------

_COORDINATES: Final = ("job_name", "group_id", "topic", "partition", "run_id", "checkpoint_id")


def _aware(value: Any) -> Any:
    """UTC wall times from DuckDB back to instants."""
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value


def _to_int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _pick(row: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {n: row[n] for n in names}


def _core(
    finding_type: str,
    severity: str,
    status: str,
    row: Mapping[str, Any],
    evidence: Mapping[str, Any],
    *,
    identity: str = "",
    cols: Sequence[str] = _COORDINATES,
    offset_start: int | None = None,
    offset_end: int | None = None,
    record_count: int | None = None,
) -> dict[str, Any]:
    """One finding in FINDING_CORE form; coordinates not in ``cols`` are null."""
    return {
        "finding_type": finding_type,
        "severity": severity,
        "status": status,
        **{c: row.get(c) if c in cols else None for c in _COORDINATES},
        "offset_start": offset_start,
        "offset_end": offset_end,
        "record_count": record_count,
        "evidence": json.dumps({k: _aware(v) for k, v in evidence.items()}, sort_keys=True, default=str),
        "identity": identity,
    }


def finding_id(row: Mapping[str, Any]) -> str:
    """rc.finding_id computed in Python: sha2-256 over the identity columns as strings."""
    parts = [_NULL if row[c] is None else str(row[c]) for c in rc.IDENTITY_COLUMNS]
    return hashlib.sha256(_SEP.join(parts).encode("utf-8")).hexdigest()


def finalize(
    core: Sequence[Mapping[str, Any]], reconcile_run_id: str, detected_at: datetime
) -> list[dict[str, Any]]:
    """FINDING_CORE rows -> findings contract rows, one per finding id (as rc.finalize_findings)."""
    rows = [
        {
            **{f.name: r.get(f.name) for f in FINDINGS_SCHEMA.fields},
            "finding_id": finding_id(r),
            "reconcile_run_id": reconcile_run_id,
            "detected_at": detected_at,
        }
        for r in core
    ]
    return rc.one_per_finding_id(rows)
