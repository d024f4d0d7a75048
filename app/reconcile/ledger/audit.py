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

Findings (CONTRACTS.md section 5): LEDGER_INCONSISTENT, UNCLEAN_STOP, COMMIT_FAILURE,
FOREIGN_COMMIT, MISSED_CHECKPOINT_COMMIT, COMMIT_MISMATCH, COMMIT_REGRESSION, SKIPPED_COMMIT,
COMMITTED_AHEAD, as typed ``Finding``s built by the rules of ``rules`` and ``commit_rules``
(``app.reconcile.findings.finalize_findings`` makes them ``StoredFinding``s: id, run, time of detection).
Views for the sink phase and forensics: completed checkpoints, the ranges the sink must hold
(``coverage``), the runs still active, the restart classification and the latest commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from app.contracts import vocabulary as vocab
from app.contracts.instants import instant
from app.contracts.vocabulary import (
    EVENT_OFFSETS_RESTORED,
    EVENT_RUN_STARTED,
    EVENT_RUN_STOPPED,
)
from app.reconcile import findings as rc
from app.reconcile.findings import Finding
from app.reconcile.ledger import commit_claims, commit_rules
from app.reconcile.ledger import rules as ledger_rules
from app.reconcile.ledger.sql import (
    CLAIM_ACKNOWLEDGED,
    CLAIM_REQUESTED,
    VIEWS,
    aware_rows,
    naive_utc,
    sql_detail,
    sql_in,
    sql_secs,
    sql_ts,
)

# Skip reasons of the committer, folded into the three classes CONTRACTS.md section 5 names.


# A restart per run start and partition, as ``LedgerAudit.restarts`` classifies it: the restarts contract
# minus what the sink and the forensics run add (duplicates_observed, forensics_run_id), plus the
# previous checkpoint's id and run for the evidence.
RESTART_COLUMNS: Final = (
    "job_name",
    "run_id",
    "previous_run_id",
    "started_at",
    "group_id",
    "topic",
    "partition",
    "resumed_offset",
    "resume_source",
    "previous_checkpoint_offset",
    "previous_checkpoint_id",
    "previous_checkpoint_run",
    "group_committed_offset",
    "classification",
    "records_replayed",
    "records_skipped",
)


class LedgerAudit:
    """An in-process database over one window's ledger and group commits (Arrow tables with the
    ledger and group_commits contract columns). The rules it runs take it as
    ``queries.LedgerQueries``."""

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

    def within(self, expr: str) -> str:
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
        newest = None if row is None or row[0] is None else instant(row[0])
        if self.ingested_at is None:
            return newest
        ingested = self.ingested_at - timedelta(seconds=self.rules.clock_skew_s)
        return ingested if newest is None else max(newest, ingested)

    def all_findings(self) -> list[Finding]:
        """Every ledger- and commit-derived finding of the window, as typed ``Finding``s."""
        return [
            *ledger_rules.ledger_inconsistencies(self),
            *ledger_rules.unclean_stops(self),
            *commit_rules.commit_failures(self),
            *commit_rules.foreign_commits(self),
            *commit_rules.missed_checkpoint_commits(self),
            *commit_rules.commit_mismatches(self),
            *commit_rules.commit_regressions(self),
            *commit_rules.skipped_commits(self, self.horizon()),
            *commit_rules.committed_ahead(self),
        ]

    # --- views the sink phase and forensics use --------------------------------------------------

    def checkpoints(self) -> list[dict[str, Any]]:
        """Completed checkpoints per partition: job_name, run_id, checkpoint_id, topic, partition,
        group_id, engine, offset (normalized), raw_offset, completed_at.

        A completion recorded without partition rows (the committer's unknown-checkpoint case)
        takes its offsets from the checkpoint's snapshot. Repeated events of one checkpoint
        collapse to the first completion time.
        """
        return aware_rows(self.rows("SELECT * FROM checkpoints"))

    def latest_commits(self) -> dict[tuple[str | None, str, int], tuple[int | None, datetime | None]]:
        """(group, topic, partition) -> the group's last committed offset before ``until`` and its time."""
        rows = self.rows(
            'SELECT group_id, topic, "partition", committed_offset, commit_time FROM latest_commits'
        )
        return {
            (r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], instant(r["commit_time"]))
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

    def run_detail(self, key: str) -> dict[tuple[str, str], str]:
        """(job, run) -> the value of ``key`` in the detail of the run's RUN_STARTED, where it has one."""
        rows = self.rows(
            f"""
            SELECT job_name, run_id, max({sql_detail(key)}) AS value FROM ledger
            WHERE event_type = '{EVENT_RUN_STARTED}' GROUP BY job_name, run_id
            """
        )
        return {(r["job_name"], r["run_id"]): r["value"] for r in rows if r["value"] is not None}

    def run_starts(self) -> dict[tuple[str, str], datetime]:
        """(job, run) -> when the run started (its first RUN_STARTED)."""
        rows = aware_rows(self.rows("SELECT job_name, run_id, started_at FROM runs"))
        return {(r["job_name"], r["run_id"]): r["started_at"] for r in rows if r["started_at"] is not None}

    def restored_offsets(self) -> dict[tuple[str, str, str, int], int]:
        """(job, run, topic, partition) -> the offset the run started from (OFFSETS_RESTORED)."""
        rows = self.rows(
            f"""
            SELECT job_name, run_id, topic, "partition", min("offset") AS "offset" FROM ledger
            WHERE event_type = '{EVENT_OFFSETS_RESTORED}' AND "offset" IS NOT NULL
              AND "partition" IS NOT NULL
            GROUP BY job_name, run_id, topic, "partition"
            """
        )
        return {(r["job_name"], r["run_id"], r["topic"], r["partition"]): r["offset"] for r in rows}

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
                FROM ck WHERE {self.within("completed_at")} GROUP BY {key}
            ), base AS (
                SELECT {key}, arg_max_null("offset", completed_at) AS baseline
                FROM ck WHERE {before} GROUP BY {key}
            ), restored AS (
                SELECT {key}, min("offset") AS restored
                FROM ledger
                WHERE event_type = '{EVENT_OFFSETS_RESTORED}' AND "offset" IS NOT NULL
                  AND {self.within("event_time")}
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
        return aware_rows(rows)

    def restarts(self) -> list[dict[str, Any]]:
        """One row per run start in the window (that has a previous run) and partition.

        A restart is judged per partition against the position the job had reached before the run
        started: the last checkpoint of the job completed before it by another run, unless the
        previous run started after that checkpoint (then where the previous run started: a run
        that never checkpointed an offset of the partition is still there, as a Flink source whose
        state keeps its startup marker until it reads); resumed at it -> exact, below it -> replay,
        above it -> skip, either unknown -> unknown. Partitions come from the run's OFFSETS_RESTORED
        rows and from that checkpoint, so a partition the new run never restored still shows up (as
        unknown). The group's committed offset at the start (plus clock skew) is kept beside it.
        Columns: RESTART_COLUMNS.
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
                SELECT * FROM runs WHERE previous_run_id IS NOT NULL AND {self.within("started_at")}
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
                       arg_max_null(k.run_id, {order}) AS previous_checkpoint_run,
                       max(k.completed_at) AS previous_at
                FROM r JOIN checkpoints k ON r.job_name = k.job_name
                -- Never the run's own batch: a RUN_STARTED written late (an attach after the
                -- run's first batches, a clock skew between the file system and the writer) is
                -- dated after the run's first completions.
                WHERE k."offset" IS NOT NULL AND k.completed_at < r.started_at AND k.run_id <> r.run_id
                GROUP BY r.job_name, r.run_id, k.topic, k."partition"
            ), prior_start AS (
                -- No checkpoint of the partition completed since the previous run started (a run
                -- killed inside its first batch, a Flink source that never read the partition):
                -- the position the job had reached is where the previous run started.
                SELECT r.job_name, r.run_id, o.topic, o."partition",
                       arg_min_null(o."offset", o.event_time) AS previous_checkpoint_offset,
                       NULL::BIGINT AS previous_checkpoint_id,
                       r.previous_run_id AS previous_checkpoint_run,
                       min(o.event_time) AS previous_at
                FROM r JOIN ledger o ON o.job_name = r.job_name AND o.run_id = r.previous_run_id
                WHERE o.event_type = '{EVENT_OFFSETS_RESTORED}' AND o."offset" IS NOT NULL
                  AND o."partition" IS NOT NULL
                GROUP BY r.job_name, r.run_id, r.previous_run_id, o.topic, o."partition"
            ), prior AS (
                SELECT c.* EXCLUDE (previous_at) FROM prior_checkpoint c WHERE NOT EXISTS (
                    SELECT 1 FROM prior_start s WHERE c.job_name = s.job_name AND c.run_id = s.run_id
                      AND c.topic = s.topic AND c."partition" = s."partition"
                      AND s.previous_at > c.previous_at)
                UNION ALL BY NAME
                SELECT s.* EXCLUDE (previous_at) FROM prior_start s WHERE NOT EXISTS (
                    SELECT 1 FROM prior_checkpoint c WHERE c.job_name = s.job_name
                      AND c.run_id = s.run_id AND c.topic = s.topic AND c."partition" = s."partition"
                      AND c.previous_at >= s.previous_at)
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
                   CASE WHEN resumed_offset IS NULL OR previous_checkpoint_offset IS NULL
                             THEN '{vocab.RESTART_UNKNOWN}'
                        WHEN resumed_offset = previous_checkpoint_offset THEN '{vocab.RESTART_EXACT}'
                        WHEN resumed_offset < previous_checkpoint_offset THEN '{vocab.RESTART_REPLAYED}'
                        ELSE '{vocab.RESTART_SKIPPED}' END AS classification,
                   CASE WHEN resumed_offset < previous_checkpoint_offset
                        THEN previous_checkpoint_offset - resumed_offset ELSE 0 END AS records_replayed,
                   CASE WHEN resumed_offset > previous_checkpoint_offset
                        THEN resumed_offset - previous_checkpoint_offset ELSE 0 END AS records_skipped
            FROM at_start
            """
        )
        return [{c: r[c] for c in RESTART_COLUMNS} for r in aware_rows(rows)]

    def copy_dates(self, duplicates: Sequence[Finding]) -> list[rc.CopyDates]:
        """For each DUPLICATE, what the ledger says of its copies (``findings.CopyDates``), in one
        query: the completion of each writer's (run, checkpoint) of the job, the job's runs among
        the writers, and the first completion of a checkpoint of the job covering the offsets."""
        if not duplicates:
            return []
        writers = [
            {"i": i, "job_name": f.job_name, "run_id": w.get("run"), "checkpoint_id": w.get("cp")}
            for i, f in enumerate(duplicates)
            for w in f.evidence.get("writers", [])
            if isinstance(w, Mapping)
        ]
        ranges = [
            {"i": i, "job_name": f.job_name, "topic": f.topic, "partition": f.partition, "end": f.offset_end}
            for i, f in enumerate(duplicates)
        ]
        self._db.register("dup_writers", pa.Table.from_pylist(writers, schema=_DUP_WRITERS))
        self._db.register("dup_ranges", pa.Table.from_pylist(ranges, schema=_DUP_RANGES))
        try:
            rows = self.rows(
                """
                WITH completions AS (
                    SELECT job_name, run_id, checkpoint_id, min(completed_at) AS completed_at
                    FROM checkpoints GROUP BY job_name, run_id, checkpoint_id
                ), job_runs AS (
                    SELECT job_name, run_id FROM ledger WHERE run_id IS NOT NULL GROUP BY job_name, run_id
                ), written AS (
                    SELECT w.i,
                           list(DISTINCT c.completed_at) FILTER (c.completed_at IS NOT NULL) AS written_at,
                           list(DISTINCT r.run_id) FILTER (r.run_id IS NOT NULL) AS job_runs
                    FROM dup_writers w
                    LEFT JOIN completions c ON c.job_name = w.job_name AND c.run_id = w.run_id
                     AND c.checkpoint_id = w.checkpoint_id
                    LEFT JOIN job_runs r ON r.job_name = w.job_name AND r.run_id = w.run_id
                    GROUP BY w.i
                ), processed AS (
                    SELECT d.i, min(k.completed_at) AS processed_at
                    FROM dup_ranges d JOIN checkpoints k
                      ON k.job_name = d.job_name AND k.topic = d.topic AND k."partition" = d."partition"
                     AND k."offset" >= d."end"
                    GROUP BY d.i
                )
                SELECT d.i, w.written_at, w.job_runs, p.processed_at
                FROM dup_ranges d LEFT JOIN written w ON d.i = w.i LEFT JOIN processed p ON d.i = p.i
                """
            )
        finally:
            self._db.unregister("dup_writers")
            self._db.unregister("dup_ranges")
        by_index = {r["i"]: r for r in rows}
        return [
            rc.CopyDates(
                written_at=tuple(sorted(instant(t) for t in by_index[i]["written_at"] or [])),
                job_runs=tuple(sorted(by_index[i]["job_runs"] or [])),
                processed_at=instant(by_index[i]["processed_at"]),
            )
            for i in range(len(duplicates))
        ]

    # --- LEDGER_INCONSISTENT -----------------------------------------------------------------------

    # --- UNCLEAN_STOP --------------------------------------------------------------------------------

    # --- COMMIT_FAILURE ----------------------------------------------------------------------------

    # --- commit matching ---------------------------------------------------------------------------

    def ensure_matched(self) -> None:
        """A temp table ``matched``: each effective group commit with the claim of the job that
        makes it the job's own, if any.

        A claim is one commit attempt of one partition (``claims``: a COMMIT_REQUESTED and the
        COMMIT_SUCCEEDED of the same attempt together, or a recovered completion the dead process
        may have sent). It explains a commit of an offset it carries, made inside its span:

        - from its request (a recovered completion: when Spark wrote the batch's commit file),
          less the clock skew between the job's and the broker's clocks: a commit made earlier was
          made before the job asked for that offset (its run made the request, so also before the
          run started), however close in time: an operator's reset while the job was down;
          without a recorded request, from the acknowledgement less the match window, and never
          before the run's start;
        - to its acknowledgement plus the clock skew (Kafka stored it before answering), or, never
          acknowledged (failed, closed as OUTCOME_UNKNOWN), the request plus
          ``commit_match_window_s``.

        One claim explains at most one commit and one commit is explained by at most one claim
        (``commit_claims.pair_claims``: in the order both were made, then the nearest commit at or
        after the request), so a reset to the very offset the job then commits is foreign although
        the job's own commit of it follows. An Admin API snapshot is no commit but a reading of
        the group's offset, which many ingests repeat: it is explained by any claim made before
        it (plus the skew).
        ``match_kind`` says how:

        - 'exact': the offset the job requested or was acknowledged;
        - 'raw': the request's raw offset where it differs from the normalized one (Flink
          legacy's last processed offset): what a committer that forgot the +1 sends. The
          commit is the job's, and COMMIT_MISMATCH reports its wrong offset;
        - null: no claim explains it. The commit is foreign whenever it was made, even seconds
          after the job's own commit: a reset of the group (to earliest, to latest) or another
          client committing with the job's group id.
        """
        if self._has_matched:
            return
        skew, window = sql_secs(self.rules.clock_skew_s), sql_secs(self.rules.commit_match_window_s)
        same_tp = 'c.group_id = a.group_id AND c.topic = a.topic AND c."partition" = a."partition"'
        carried = "k.claim_row = a.claim_row AND k.carried_offset = c.committed_offset"
        requested = f"claim = '{CLAIM_REQUESTED}'"
        acknowledged = f"claim = '{CLAIM_ACKNOWLEDGED}'"
        self._db.execute(
            f"""
            CREATE TEMP TABLE claim_spans AS
            WITH started AS (
                SELECT job_name, run_id, min(event_time) AS started_at
                FROM ledger WHERE event_type = '{EVENT_RUN_STARTED}' GROUP BY job_name, run_id
            ), attempts AS (
                SELECT job_name, run_id, checkpoint_id, group_id, topic, "partition", attempt, recovered,
                       min(requested_at) FILTER (WHERE {requested}) AS requested_at,
                       arg_min(requested_offset, requested_at) FILTER (WHERE {requested}) AS requested_offset,
                       arg_min(requested_raw, requested_at) FILTER (WHERE {requested}) AS requested_raw,
                       min(requested_at) FILTER (WHERE {acknowledged}) AS acknowledged_at,
                       arg_min(requested_offset, requested_at) FILTER (WHERE {acknowledged})
                           AS acknowledged_offset,
                       max(checkpoint_offset) AS checkpoint_offset
                FROM claims
                GROUP BY job_name, run_id, checkpoint_id, group_id, topic, "partition", attempt, recovered
            )
            SELECT row_number() OVER (
                       ORDER BY a.job_name, a.run_id, a.checkpoint_id, a.topic, a."partition", a.attempt
                   ) AS claim_row,
                   a.*, coalesce(a.requested_at, a.acknowledged_at) AS claimed_at,
                   coalesce(a.requested_at, least(greatest(a.acknowledged_at - {window}, s.started_at),
                                                  a.acknowledged_at)) - {skew} AS earliest,
                   coalesce(a.acknowledged_at + {skew}, a.requested_at + {window}) AS latest
            FROM attempts a LEFT JOIN started s ON a.job_name = s.job_name AND a.run_id = s.run_id;

            -- The offsets each claim carries, an exact one over the request's raw one.
            CREATE TEMP TABLE claim_offsets AS
            SELECT claim_row, carried_offset, min(match_kind) AS match_kind FROM (
                SELECT claim_row, requested_offset AS carried_offset, 'exact' AS match_kind FROM claim_spans
                UNION ALL
                SELECT claim_row, acknowledged_offset, 'exact' FROM claim_spans
                UNION ALL
                SELECT claim_row, requested_raw, 'raw' FROM claim_spans
                WHERE requested_raw >= 0 AND requested_raw != requested_offset
            ) WHERE carried_offset IS NOT NULL GROUP BY claim_row, carried_offset;

            CREATE TEMP TABLE claim_candidates AS
            SELECT c.commit_row, c.commit_time, c.log_offset, a.claim_row, a.claimed_at, a.latest,
                   k.match_kind,
                   count(*) OVER (PARTITION BY c.commit_row) AS claims_of_commit,
                   count(*) OVER (PARTITION BY a.claim_row) AS commits_of_claim
            FROM commits c
            JOIN claim_spans a ON {same_tp}
            JOIN claim_offsets k ON {carried}
            WHERE c.record_kind = '{vocab.RECORD_COMMIT}'
              AND c.commit_time BETWEEN a.earliest AND a.latest;
            """
        )
        # Nearly every commit and claim have one candidate each: paired as they stand. The rest
        # (a reset or a retry of an offset inside a claim's span) are paired one to one in Python.
        contested = [
            commit_claims.Candidate(
                r["claim_row"],
                r["claimed_at"],
                r["latest"],
                r["commit_row"],
                r["commit_time"],
                r["match_kind"] == "exact",
                r["log_offset"],
            )
            for r in self.rows(
                "SELECT * FROM claim_candidates WHERE claims_of_commit > 1 OR commits_of_claim > 1"
            )
        ]
        pairs = commit_claims.pair_claims(contested)
        self._db.register(
            "claim_pairs",
            pa.Table.from_pylist([{"claim_row": a, "commit_row": c} for a, c in pairs], schema=_CLAIM_PAIRS),
        )
        try:
            self._db.execute(
                f"""
                CREATE TEMP TABLE matched AS
                WITH paired AS (
                    SELECT commit_row, claim_row, match_kind FROM claim_candidates
                    WHERE claims_of_commit = 1 AND commits_of_claim = 1
                    UNION ALL
                    SELECT k.commit_row, k.claim_row, k.match_kind
                    FROM claim_pairs p JOIN claim_candidates k
                      ON k.commit_row = p.commit_row AND k.claim_row = p.claim_row
                ), observed AS (
                    SELECT c.commit_row, a.claim_row, k.match_kind
                    FROM commits c
                    JOIN claim_spans a ON {same_tp}
                    JOIN claim_offsets k ON {carried}
                    WHERE c.record_kind = '{vocab.RECORD_SNAPSHOT}'
                      AND (c.commit_time IS NULL OR a.claimed_at <= c.commit_time + {skew})
                    QUALIFY row_number() OVER (
                        PARTITION BY c.commit_row
                        ORDER BY k.match_kind = 'exact' DESC, a.requested_at IS NOT NULL DESC,
                                 a.claimed_at DESC, a.run_id) = 1
                ), own AS (
                    SELECT * FROM paired UNION ALL SELECT * FROM observed
                )
                SELECT c.*, o.match_kind, a.job_name, a.run_id, a.checkpoint_id,
                       coalesce(a.requested_offset, a.acknowledged_offset) AS requested_offset,
                       a.checkpoint_offset, a.claimed_at AS requested_at
                FROM commits c
                LEFT JOIN own o ON c.commit_row = o.commit_row
                LEFT JOIN claim_spans a ON a.claim_row = o.claim_row
                """
            )
        finally:
            self._db.unregister("claim_pairs")
        self._has_matched = True

    # --- COMMIT_REGRESSION -------------------------------------------------------------------------

    # --- SKIPPED_COMMIT ----------------------------------------------------------------------------

    # --- COMMITTED_AHEAD ---------------------------------------------------------------------------


# The claims and commits ``commit_claims.pair_claims`` paired.
_CLAIM_PAIRS: Final = pa.schema([("claim_row", pa.int64()), ("commit_row", pa.int64())])

# The keys of the DUPLICATE findings ``copy_dates`` looks up: their writers, and their ranges.
_DUP_WRITERS: Final = pa.schema(
    [("i", pa.int64()), ("job_name", pa.string()), ("run_id", pa.string()), ("checkpoint_id", pa.int64())]
)
_DUP_RANGES: Final = pa.schema(
    [
        ("i", pa.int64()),
        ("job_name", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("end", pa.int64()),
    ]
)


def ledger_groups(ledger: pa.Table) -> list[str]:
    """The consumer groups the ledger's jobs commit to."""
    return sorted(g for g in pc.unique(ledger.column("group_id")).to_pylist() if g is not None)


# --- rows -------------------------------------------------------------------------------------------
