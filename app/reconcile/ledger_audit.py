"""Everything reconcile and forensics derive from the ledger and the group's commits, computed on
the driver in an in-process DuckDB.

The ledger window and the group's commits are small next to the sink (one row per checkpoint and
partition, about 800K rows for a 1B-row sink), but answering these questions in Spark took some 80
short stages: 10-40 s of scheduling for a few hundred milliseconds of work, which dominated a
nightly run. So the I/O module reads both once into Arrow, and the joins, windows and aggregates
below run in DuckDB, whose SQL keeps the semantics of the Spark versions they replaced: the same
null ordering (nulls first ascending, last descending), null-rejecting equi-joins, ``max_by`` as
``arg_max_null``, ``get_json_object`` as ``detail()`` (null on malformed JSON), and the same finding
identities, so finding ids are unchanged.

Findings (shared/DESIGN.md section 5): LEDGER_INCONSISTENT, COMMIT_FAILURE, FOREIGN_COMMIT,
COMMIT_MISMATCH, COMMIT_REGRESSION, SKIPPED_COMMIT, COMMITTED_AHEAD, as rows in FINDING_CORE form
(plain dicts; ``app.reconcile.findings.finalize_findings`` adds the id, the run and the time of detection).
Views for the sink phase and forensics: completed checkpoints, the ranges the sink must hold
(``coverage``), the runs still active, the restart classification and the latest commits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from app.contracts import vocabulary as vocab
from app.contracts.vocabulary import (
    ERROR_OUTCOME_UNKNOWN,
    EVENT_CHECKPOINT_COMPLETED,
    EVENT_CHECKPOINT_SNAPSHOT,
    EVENT_COMMIT_FAILED,
    EVENT_COMMIT_REQUESTED,
    EVENT_COMMIT_SKIPPED,
    EVENT_COMMIT_SUCCEEDED,
    EVENT_OFFSETS_RESTORED,
    EVENT_RUN_STOPPED,
)
from app.reconcile import findings as rc
from app.reconcile import forensics as fx
from app.reconcile.ledger_sql import VIEWS, naive_utc, sql_detail, sql_in, sql_secs, sql_ts

# Skip reasons of the committer, folded into the three classes DESIGN section 5 names.

_IDENTITY: Final = (
    "concat_ws('|', coalesce(CAST(log_partition AS VARCHAR), '-'), "
    "coalesce(CAST(log_offset AS VARCHAR), '-'), CAST(committed_offset AS VARCHAR))"
)


class LedgerAudit:
    """An in-process database over one window's ledger and group commits (Arrow tables with the
    ledger and group_commits contract columns)."""

    def __init__(
        self,
        ledger: pa.Table,
        group_commits: pa.Table,
        window: rc.AuditWindow,
        rules: rc.MatchRules,
        ingested_at: datetime | None = None,
    ):
        self.window = window
        self.rules = rules
        self.ingested_at = ingested_at
        self._db = duckdb.connect(":memory:")
        # Spark's order of nulls, which the ranking below relies on.
        self._db.execute("SET default_null_order = 'nulls_first_on_asc_last_on_desc'")
        self._has_matched = False
        self._db.register("ledger", naive_utc(ledger))
        self._db.register("gc", naive_utc(group_commits))
        self._db.execute(VIEWS)
        # The group's last effective commit per partition before the window's end.
        self._db.execute(
            f"""
            CREATE TEMP VIEW latest_commits AS
            SELECT * FROM commits WHERE effective_time < {sql_ts(window.until)}
            QUALIFY row_number() OVER (
                PARTITION BY group_id, topic, "partition"
                ORDER BY effective_time DESC NULLS LAST, log_offset DESC NULLS LAST) = 1
            """
        )

    def close(self) -> None:
        self._db.close()

    # --- plumbing --------------------------------------------------------------------------------

    def rows(self, sql: str) -> list[dict[str, Any]]:
        cursor = self._db.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]

    def _within(self, expr: str) -> str:
        """SQL of the window test: ``expr`` in [since, until); null is outside."""
        inside = f"({expr}) < {sql_ts(self.window.until)}"
        return (
            inside if self.window.since is None else f"{inside} AND ({expr}) >= {sql_ts(self.window.since)}"
        )

    def horizon(self) -> datetime | None:
        """How far group_commits has been ingested: when the last ingest read __consumer_offsets
        (``ingested_at``, minus clock skew), or at least the newest log (or commit) time in it.

        The newest commit alone is not enough: a job that stopped commits nothing more, so its
        last checkpoints would never be judged."""
        row = self._db.execute("SELECT max(coalesce(log_time, commit_time)) FROM gc").fetchone()
        newest = None if row is None or row[0] is None else _aware(row[0])
        if self.ingested_at is None:
            return newest
        ingested = self.ingested_at - timedelta(seconds=self.rules.clock_skew_s)
        return ingested if newest is None else max(newest, ingested)

    def all_findings(self) -> list[dict[str, Any]]:
        """Every ledger- and commit-derived finding of the window, in FINDING_CORE form."""
        return [
            *self.ledger_inconsistencies(),
            *self.unclean_stops(),
            *self.commit_failures(),
            *self.foreign_commits(),
            *self.commit_mismatches(),
            *self.commit_regressions(),
            *self.skipped_commits(self.horizon()),
            *self.committed_ahead(),
        ]

    # --- views the sink phase and forensics use --------------------------------------------------

    def checkpoints(self) -> list[dict[str, Any]]:
        """Completed checkpoints per partition: job_name, run_id, checkpoint_id, topic, partition,
        group_id, engine, offset (normalized), raw_offset, completed_at.

        A completion recorded without partition rows (the committer's unknown-checkpoint case)
        takes its offsets from the checkpoint's snapshot. Repeated events of one checkpoint
        collapse to the first completion time.
        """
        return _aware_rows(self.rows("SELECT * FROM checkpoints"))

    def latest_commits(self) -> dict[tuple[str | None, str, int], tuple[int | None, datetime | None]]:
        """(group, topic, partition) -> the group's last committed offset before ``until`` and its time."""
        rows = self.rows(
            'SELECT group_id, topic, "partition", committed_offset, commit_time FROM latest_commits'
        )
        return {
            (r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], _aware(r["commit_time"]))
            for r in rows
        }

    def active_runs(self) -> dict[str, str]:
        """job -> its latest run when that run has not stopped (its newest batch may be in flight)."""
        rows = self.rows(
            f"""
            WITH latest AS (
                SELECT job_name, arg_max_null(run_id, started_at) AS run_id FROM runs GROUP BY job_name
            )
            SELECT * FROM latest l WHERE NOT EXISTS (
                SELECT 1 FROM ledger s WHERE s.event_type = '{EVENT_RUN_STOPPED}'
                  AND s.job_name = l.job_name AND s.run_id = l.run_id)
            """
        )
        return {r["job_name"]: r["run_id"] for r in rows}

    def coverage(self) -> list[dict[str, Any]]:
        """Per job and partition, the offsets [lo, hi) the window's checkpoints vouch for.

        hi is the highest offset of a checkpoint completed in the window. lo is where the window's
        data starts: the last checkpoint completed before it (within the look-back read), else the
        lowest offset a run in the window restored from, else unknown (null: the sink's first
        offset is then taken as the start). ``beyond_from`` is the highest completed offset in
        everything read (also after ``until``): sink rows at or past it belong to no completed
        checkpoint.
        """
        key = 'job_name, topic, "partition"'
        on = 't.job_name = {0}.job_name AND t.topic = {0}.topic AND t."partition" = {0}."partition"'
        before = f"completed_at < {sql_ts(self.window.since)}" if self.window.since is not None else "false"
        rows = self.rows(
            f"""
            WITH ck AS (
                SELECT * FROM checkpoints WHERE "offset" IS NOT NULL
            ), top AS (
                SELECT {key}, max("offset") AS hi,
                       arg_max_null(checkpoint_id, {{'o': "offset", 't': completed_at}}) AS hi_checkpoint_id,
                       arg_max_null(run_id, {{'o': "offset", 't': completed_at}}) AS hi_run_id,
                       max(group_id) AS group_id,
                       max(completed_at) AS last_completed_at,
                       arg_max_null(checkpoint_id, completed_at) AS last_checkpoint_id,
                       arg_max_null("offset", completed_at) AS last_checkpoint_offset,
                       min("offset") AS min_in_window
                FROM ck WHERE {self._within("completed_at")} GROUP BY {key}
            ), base AS (
                SELECT {key}, arg_max_null("offset", completed_at) AS baseline
                FROM ck WHERE {before} GROUP BY {key}
            ), restored AS (
                SELECT {key}, min("offset") AS restored
                FROM ledger
                WHERE event_type = '{EVENT_OFFSETS_RESTORED}' AND "offset" IS NOT NULL
                  AND {self._within("event_time")}
                GROUP BY {key}
            ), beyond AS (
                SELECT {key}, max("offset") AS beyond_from FROM ck GROUP BY {key}
            )
            SELECT t.job_name, t.topic, t."partition", t.group_id,
                   CASE WHEN b.baseline IS NOT NULL OR r.restored IS NOT NULL
                        THEN least(coalesce(b.baseline, r.restored), r.restored, t.min_in_window) END AS lo,
                   CASE WHEN b.baseline IS NOT NULL THEN 'previous_checkpoint'
                        WHEN r.restored IS NOT NULL THEN 'restored'
                        ELSE 'sink_min' END AS lo_source,
                   t.hi, t.hi_checkpoint_id, t.hi_run_id, t.last_checkpoint_id, t.last_checkpoint_offset,
                   t.last_completed_at, y.beyond_from
            FROM top t
            LEFT JOIN base b ON {on.format("b")}
            LEFT JOIN restored r ON {on.format("r")}
            LEFT JOIN beyond y ON {on.format("y")}
            """
        )
        return _aware_rows(rows)

    def restarts(self) -> list[dict[str, Any]]:
        """One row per run start in the window (that has a previous run) and partition.

        A restart is judged per partition against the last checkpoint of the job completed before
        the run started: resumed at it -> exact, below it -> replay, above it -> skip, either
        unknown -> unknown. Partitions come from the run's OFFSETS_RESTORED rows and from that
        checkpoint, so a partition the new run never restored still shows up (as unknown). The
        group's committed offset at the start (plus clock skew) is kept beside it.
        Columns: app.reconcile.forensics.RESTART_COLUMNS.
        """
        skew = sql_secs(self.rules.clock_skew_s)
        tp = 'topic, "partition"'
        source = (
            f"coalesce({sql_detail(vocab.DETAIL_SOURCE)}, {sql_detail(vocab.DETAIL_RESUME_SOURCE)}, "
            f"{sql_detail(vocab.DETAIL_REASON)})"
        )
        order = "{'t': k.completed_at, 'c': k.checkpoint_id}"
        rows = self.rows(
            f"""
            WITH r AS (
                SELECT * FROM runs WHERE previous_run_id IS NOT NULL AND {self._within("started_at")}
            ), restored AS (
                SELECT job_name, run_id, {tp},
                       arg_min_null("offset", event_time) AS resumed_offset,
                       arg_min_null({source}, event_time) AS resume_source,
                       max(group_id) AS restored_group
                FROM ledger WHERE event_type = '{EVENT_OFFSETS_RESTORED}' AND "partition" IS NOT NULL
                GROUP BY job_name, run_id, {tp}
            ), prior_checkpoint AS (
                SELECT r.job_name, r.run_id, k.topic, k."partition",
                       arg_max_null(k."offset", {order}) AS previous_checkpoint_offset,
                       arg_max_null(k.checkpoint_id, {order}) AS previous_checkpoint_id,
                       arg_max_null(k.run_id, {order}) AS previous_checkpoint_run
                FROM r JOIN checkpoints k ON r.job_name = k.job_name
                WHERE k."offset" IS NOT NULL AND k.completed_at < r.started_at
                GROUP BY r.job_name, r.run_id, k.topic, k."partition"
            ), prior_start AS (
                -- No checkpoint ever completed (a run killed inside its first batch): the
                -- position the job had reached is where the previous run started.
                SELECT r.job_name, r.run_id, o.topic, o."partition",
                       arg_min_null(o."offset", o.event_time) AS previous_checkpoint_offset,
                       NULL::BIGINT AS previous_checkpoint_id,
                       r.previous_run_id AS previous_checkpoint_run
                FROM r JOIN ledger o ON o.job_name = r.job_name AND o.run_id = r.previous_run_id
                WHERE o.event_type = '{EVENT_OFFSETS_RESTORED}' AND o."offset" IS NOT NULL
                  AND o."partition" IS NOT NULL
                GROUP BY r.job_name, r.run_id, r.previous_run_id, o.topic, o."partition"
            ), prior AS (
                SELECT * FROM prior_checkpoint
                UNION ALL BY NAME
                SELECT s.* FROM prior_start s WHERE NOT EXISTS (
                    SELECT 1 FROM prior_checkpoint c WHERE c.job_name = s.job_name
                      AND c.run_id = s.run_id AND c.topic = s.topic AND c."partition" = s."partition")
            ), per_partition AS (
                SELECT coalesce(a.job_name, b.job_name) AS job_name,
                       coalesce(a.run_id, b.run_id) AS run_id,
                       coalesce(a.topic, b.topic) AS topic,
                       coalesce(a."partition", b."partition") AS "partition",
                       a.resumed_offset, a.resume_source, a.restored_group, b.previous_checkpoint_offset,
                       b.previous_checkpoint_id, b.previous_checkpoint_run
                FROM restored a FULL JOIN prior b
                  ON a.job_name = b.job_name AND a.run_id = b.run_id AND a.topic = b.topic
                 AND a."partition" = b."partition"
            ), base AS (
                SELECT r.previous_run_id, r.started_at, coalesce(r.group_id, p.restored_group) AS group_id,
                       p.* EXCLUDE (restored_group)
                FROM r JOIN per_partition p ON r.job_name = p.job_name AND r.run_id = p.run_id
            ), at_start AS (
                SELECT b.*, c.committed_offset AS group_committed_offset
                FROM base b LEFT JOIN gc c
                  ON c.record_kind IN ({sql_in(vocab.RECORD_KINDS)}) AND b.group_id = c.group_id
                 AND b.topic = c.topic AND b."partition" = c."partition"
                 AND coalesce(c.commit_time, c.log_time) <= b.started_at + {skew}
                QUALIFY row_number() OVER (
                    PARTITION BY b.job_name, b.run_id, b.topic, b."partition"
                    ORDER BY coalesce(c.commit_time, c.log_time) DESC NULLS LAST, c.log_offset DESC NULLS LAST
                ) = 1
            )
            SELECT *,
                   CASE WHEN resumed_offset IS NULL OR previous_checkpoint_offset IS NULL THEN '{fx.UNKNOWN}'
                        WHEN resumed_offset = previous_checkpoint_offset THEN '{fx.EXACT}'
                        WHEN resumed_offset < previous_checkpoint_offset THEN '{fx.REPLAY}'
                        ELSE '{fx.SKIP}' END AS classification,
                   CASE WHEN resumed_offset < previous_checkpoint_offset
                        THEN previous_checkpoint_offset - resumed_offset ELSE 0 END AS records_replayed,
                   CASE WHEN resumed_offset > previous_checkpoint_offset
                        THEN resumed_offset - previous_checkpoint_offset ELSE 0 END AS records_skipped
            FROM at_start
            """
        )
        return [{c: r[c] for c in fx.RESTART_COLUMNS} for r in _aware_rows(rows)]

    # --- LEDGER_INCONSISTENT -----------------------------------------------------------------------

    def ledger_inconsistencies(self) -> list[dict[str, Any]]:
        """Completed without a snapshot of the same checkpoint in any run of the job; snapshot
        offsets moving backwards in a run.

        Snapshot and completion pair by job and checkpoint id, not by run: a batch planned by a
        run that was killed and completed by its successor is consistent (the successor's own
        snapshot of the re-run batch is dropped by the ledger's idempotent append for that batch).
        A run that never stopped is not an inconsistency but an UNCLEAN_STOP (``unclean_stops``).
        """
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
                  AND s.job_name = c.job_name AND s.checkpoint_id = c.checkpoint_id)
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
        kind = "completed_without_snapshot"
        out = [
            _core(
                vocab.LEDGER_INCONSISTENT,
                vocab.WARN,
                vocab.OPEN,
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
                vocab.LEDGER_INCONSISTENT,
                vocab.WARN,
                vocab.OPEN,
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
        return out

    # --- UNCLEAN_STOP --------------------------------------------------------------------------------

    def unclean_stops(self) -> list[dict[str, Any]]:
        """Runs that never wrote RUN_STOPPED: killed or crashed.

        Judged when the job's next run started inside the window, or, for a job's last run, when
        it has been silent for ``run_silence_s`` by the window's end (before that it may be a live
        job with no new data). Info when the next run resumed exactly on every partition: the crash
        cost nothing. Otherwise warn; the impact itself is carried by the RESTART_*, GAP and
        DUPLICATE findings of that restart.
        """
        silence = sql_secs(self.rules.run_silence_s)
        silent_until = f"last_event_at + {silence}"
        rows = self.rows(
            f"""
            SELECT * FROM run_ends
            WHERE stopped_at IS NULL AND (
                (next_run_id IS NOT NULL AND {self._within("next_started_at")})
                OR (next_run_id IS NULL AND {self._within(silent_until)}))
            """
        )
        classes: dict[tuple[str, str], set[str]] = {}
        for restart in self.restarts() if rows else []:
            key = (restart["job_name"], restart["run_id"])
            classes.setdefault(key, set()).add(restart["classification"])
        out = []
        for r in rows:
            resumed = classes.get((r["job_name"], r["next_run_id"]), set()) if r["next_run_id"] else set()
            exact = resumed == {fx.EXACT}
            out.append(
                _core(
                    vocab.UNCLEAN_STOP,
                    vocab.INFO if exact else vocab.WARN,
                    vocab.OPEN,
                    r,
                    {
                        "started_at": r["started_at"],
                        "last_event_at": r["last_event_at"],
                        "last_event_type": r["last_event_type"],
                        "last_checkpoint_id": r["last_checkpoint_id"],
                        "next_run_id": r["next_run_id"],
                        "next_started_at": r["next_started_at"],
                        "next_run_resumed": sorted(resumed),
                        "silent_for_s": (
                            None
                            if r["next_run_id"]
                            else round((self.window.until - _aware(r["last_event_at"])).total_seconds())
                        ),
                    },
                    cols=("job_name", "group_id", "run_id"),
                )
            )
        return out

    # --- COMMIT_FAILURE ----------------------------------------------------------------------------

    def commit_failures(self) -> list[dict[str, Any]]:
        """COMMIT_FAILED events grouped by run, partition, Kafka error and day (the nightly unit)."""
        grouped = self.rows(
            f"""
            WITH failed AS (
                SELECT *, coalesce({sql_detail(vocab.DETAIL_ERROR)}, 'UNKNOWN') AS error
                FROM ledger
                WHERE event_type = '{EVENT_COMMIT_FAILED}' AND {self._within("event_time")}
            )
            SELECT job_name, run_id, group_id, topic, "partition", error, event_date,
                   count(*) AS failures, min(event_time) AS first_failure, max(event_time) AS last_failure,
                   coalesce(list_sort(list_distinct(list(checkpoint_id)))[1:20], []) AS checkpoint_ids,
                   max({sql_detail(vocab.DETAIL_RETRIABLE)}) AS retriable,
                   max({sql_detail(vocab.DETAIL_MESSAGE)}) AS message,
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
                vocab.COMMIT_FAILURE,
                vocab.INFO if r["error"] == ERROR_OUTCOME_UNKNOWN else vocab.WARN,
                vocab.OPEN,
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
        skew, window = sql_secs(self.rules.clock_skew_s), sql_secs(self.rules.commit_match_window_s)
        timed = f"r.requested_at - {skew} <= c.commit_time AND c.commit_time <= r.requested_at + {window}"
        snapshot_ok = (
            f"c.record_kind = '{vocab.RECORD_SNAPSHOT}' "
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
                vocab.FOREIGN_COMMIT,
                vocab.ERROR,
                vocab.OPEN,
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
                vocab.COMMIT_MISMATCH,
                vocab.ERROR,
                vocab.OPEN,
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
                FROM gc WHERE record_kind IN ({sql_in(vocab.RECORD_KINDS)})
                WINDOW w AS (PARTITION BY group_id, topic, "partition"
                             ORDER BY coalesce(commit_time, log_time) ASC NULLS FIRST,
                                      log_offset ASC NULLS FIRST)
            )
            SELECT o.*, g.job_name, {_IDENTITY} AS identity
            FROM ordered o LEFT JOIN job_groups g ON o.group_id = g.group_id
            WHERE record_kind != '{vocab.RECORD_TOMBSTONE}' AND prev_kind != '{vocab.RECORD_TOMBSTONE}'
              AND committed_offset < prev_offset
              AND {self._within("coalesce(commit_time, log_time)")}
            """
        )
        return [
            _core(
                vocab.COMMIT_REGRESSION,
                vocab.ERROR,
                vocab.OPEN,
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
        skew). ``horizon`` is how far group_commits has been ingested (None: never, so nothing is
        judged). A checkpoint is judged once its fate is known by then: its run has ended (stopped,
        or the job started again) or it completed a match window before the horizon; before
        that its commit may still be in flight. Checkpoints completed in the match window before
        ``since`` are judged again, so one left unjudged at the end of the previous window is not
        lost when the window moves on (the finding ids are the same).

        Whatever the reason (superseded, failed, never attempted), a checkpoint whose offsets a
        later commit of the same job covered (a group commit that job's requests explain, at or
        beyond its offset, by the horizon) is benign (info); one nothing covered is a warning;
        commit_disabled is information.
        """
        if horizon is None:
            return []
        self._ensure_matched()
        skew, window = sql_secs(self.rules.clock_skew_s), sql_secs(self.rules.commit_match_window_s)
        same_tp = (
            'c.group_id = k.group_id AND c.topic = k.topic AND c."partition" = k."partition" '
            f"AND c.effective_time >= k.completed_at - {skew}"
        )
        judged_from = (
            ""
            if self.window.since is None
            else f"AND k.completed_at >= {sql_ts(self.window.since)} - {window}"
        )
        known_by = sql_ts(horizon)
        key = "job_name, run_id, checkpoint_id"
        superseded = sql_in(vocab.SUPERSEDED_SKIP_REASONS)
        rows = self.rows(
            f"""
            WITH unreached AS (
                SELECT k.* FROM checkpoints k
                LEFT JOIN run_ends e ON k.job_name = e.job_name AND k.run_id = e.run_id
                WHERE k."offset" IS NOT NULL AND k.completed_at < {sql_ts(self.window.until)} {judged_from}
                  AND (k.completed_at + {window} <= {known_by}
                       OR (e.ended_at IS NOT NULL AND e.ended_at + {skew} <= {known_by}))
                  AND NOT EXISTS (SELECT 1 FROM commits c WHERE {same_tp} AND c.committed_offset = k."offset")
            ), covering AS (
                SELECT k.job_name, k.run_id, k.checkpoint_id, k.topic, k."partition",
                       min(c.effective_time) AS covered_at,
                       arg_min_null(c.committed_offset, c.effective_time) AS covered_by_offset,
                       arg_min_null(c.checkpoint_id, c.effective_time) AS covered_by_checkpoint
                FROM unreached k JOIN matched c
                  ON {same_tp} AND c.committed_offset >= k."offset" AND c.job_name = k.job_name
                 AND c.effective_time <= {known_by}
                GROUP BY k.job_name, k.run_id, k.checkpoint_id, k.topic, k."partition"
            ), events AS (
                SELECT * FROM ledger WHERE checkpoint_id IS NOT NULL
            ), skipped AS (
                SELECT {key}, max({sql_detail(vocab.DETAIL_REASON)}) AS skip_reason,
                       max({sql_detail(vocab.DETAIL_SUPERSEDED_BY)}) AS superseded_by
                FROM events WHERE event_type = '{EVENT_COMMIT_SKIPPED}' GROUP BY {key}
            ), failed AS (
                SELECT {key}, topic, "partition", max({sql_detail(vocab.DETAIL_ERROR)}) AS error
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
                           unnest(TRY_CAST({sql_detail(vocab.DETAIL_DISCARDED_PENDING)} AS BIGINT[]))
                               AS checkpoint_id
                    FROM events WHERE event_type = '{EVENT_CHECKPOINT_COMPLETED}'
                ) GROUP BY job_name, run_id, checkpoint_id
            ), joined AS (
                SELECT u.*, s.skip_reason, s.superseded_by, d.discarded_by, f.error, o.requested,
                       o.acknowledged, v.covered_at, v.covered_by_offset, v.covered_by_checkpoint
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
                WHEN error IS NOT NULL THEN '{vocab.SKIPPED_FAILED}'
                WHEN skip_reason IN ({superseded}) OR discarded_by IS NOT NULL
                     THEN '{vocab.SKIPPED_SUPERSEDED}'
                WHEN skip_reason = '{vocab.SKIP_COMMIT_DISABLED}' THEN '{vocab.SKIPPED_DISABLED}'
                WHEN acknowledged THEN '{vocab.SKIPPED_ACKNOWLEDGED_NOT_FOUND}'
                ELSE '{vocab.SKIPPED_NEVER_ATTEMPTED}' END AS reason
            FROM joined
            """
        )
        out = []
        for r in rows:
            benign = r["covered_at"] is not None
            superseded_by = _to_int(r["superseded_by"])
            out.append(
                _core(
                    vocab.SKIPPED_COMMIT,
                    vocab.INFO if benign or r["reason"] == "commit_disabled" else vocab.WARN,
                    vocab.BENIGN if benign else vocab.OPEN,
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
                        "covered_by_checkpoint": r["covered_by_checkpoint"],
                        "covered_at": r["covered_at"],
                    },
                    offset_start=r["offset"],
                )
            )
        return out

    # --- COMMITTED_AHEAD ---------------------------------------------------------------------------

    def committed_ahead(self) -> list[dict[str, Any]]:
        """The group's latest committed offset beyond every checkpoint completed before ``until``."""
        until = sql_ts(self.window.until)
        ahead = self.rows(
            f"""
            WITH done AS (
                SELECT group_id, topic, "partition", max("offset") AS max_completed,
                       arg_max_null(checkpoint_id, "offset") AS max_checkpoint,
                       arg_max_null(run_id, "offset") AS max_run
                FROM checkpoints WHERE completed_at < {until} AND "offset" IS NOT NULL
                GROUP BY group_id, topic, "partition"
            )
            SELECT l.*, d.max_completed, d.max_checkpoint, d.max_run, g.job_name
            FROM latest_commits l
            JOIN done d ON l.group_id = d.group_id AND l.topic = d.topic AND l."partition" = d."partition"
            LEFT JOIN job_groups g ON l.group_id = g.group_id
            WHERE l.committed_offset > d.max_completed
            """
        )
        return [
            _core(
                vocab.COMMITTED_AHEAD,
                vocab.CRITICAL,
                vocab.OPEN,
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


def _aware_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: _aware(v) for k, v in r.items()} for r in rows]


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
