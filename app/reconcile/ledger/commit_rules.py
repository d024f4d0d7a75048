"""Findings from the ledger next to the group's commits (CONTRACTS.md section 5): COMMIT_FAILURE,
FOREIGN_COMMIT, MISSED_CHECKPOINT_COMMIT, COMMIT_MISMATCH, COMMIT_REGRESSION, SKIPPED_COMMIT and
COMMITTED_AHEAD.

Each rule is one DuckDB query over the views of ``app.reconcile.ledger.sql``, given the window's
``LedgerQueries`` (``LedgerAudit`` implements them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from app.contracts import vocabulary as vocab
from app.reconcile.findings import Finding
from app.reconcile.ledger.queries import LedgerQueries
from app.reconcile.ledger.sql import (
    IDENTITY_SQL,
    pick,
    sql_detail,
    sql_in,
    sql_secs,
    sql_ts,
    to_int,
)

# The commit outcomes a COMMIT_FAILURE only informs of (see commit_failures).
_INFO_ERRORS: Final = (vocab.ERROR_OUTCOME_UNKNOWN, vocab.ERROR_COMMITS_FAILED_METRIC)


def commit_failures(audit: LedgerQueries) -> list[Finding]:
    """COMMIT_FAILED events grouped by run, partition, Kafka error and day (the nightly unit)."""
    grouped = audit.rows(
        f"""
        WITH failed AS (
            SELECT *, coalesce({sql_detail(vocab.DETAIL_ERROR)}, 'UNKNOWN') AS error
            FROM ledger
            WHERE event_type = '{vocab.EVENT_COMMIT_FAILED}' AND {audit.within("event_time")}
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
    # against __consumer_offsets, so here it is only information. So is a Flink source's count
    # of failed commits (COMMITS_FAILED_METRIC): neither the error nor the commits are known, and
    # a new group's first commits fail retriably while its coordinator loads.
    return [
        Finding.of(
            vocab.COMMIT_FAILURE,
            vocab.INFO if r["error"] in _INFO_ERRORS else vocab.WARN,
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


def unmatched_commits(audit: LedgerQueries) -> list[dict[str, Any]]:
    """The window's group commits no claim of the job explains (``ensure_matched``), each with the
    span of missed checkpoints (``missed_spans``) that holds it, if one does (its ``missed_ids``
    null otherwise): of the span's group and partition, an offset in [from, to], made after the
    span's lower completion (or the run's start) less the clock skew and before its upper completion
    plus ``commit_match_window_s`` (a missed checkpoint commits once it completed, which was before
    the upper one did; its commit may still be in flight then), and not below the partition's
    previous offset (the job's commits only move forward: an operator's reset backwards into the
    span, say after the job was cancelled, stays foreign). An Admin API snapshot, a reading of the
    group's offset, is held by a span it was read after. Of several spans, the first to end."""
    audit.ensure_matched()
    skew, window = sql_secs(audit.rules.clock_skew_s), sql_secs(audit.rules.commit_match_window_s)
    return audit.rows(
        f"""
        SELECT m.* EXCLUDE (job_name, run_id, checkpoint_id), coalesce(s.job_name, g.job_name) AS job_name,
               s.run_id, s.missed_ids, s.from_checkpoint, s.from_offset, s.to_checkpoint, s.to_offset,
               {IDENTITY_SQL} AS identity
        FROM matched m
        LEFT JOIN job_groups g ON m.group_id = g.group_id
        LEFT JOIN missed_spans s
          ON m.group_id = s.group_id AND m.topic = s.topic AND m."partition" = s."partition"
         AND m.committed_offset BETWEEN s.from_offset AND s.to_offset
         -- the job's commits of successive checkpoints only move forward: a step back is a reset
         AND (m.previous_offset IS NULL OR m.committed_offset >= m.previous_offset)
         AND m.effective_time >= s.from_time - {skew}
         AND (m.record_kind = '{vocab.RECORD_SNAPSHOT}' OR m.effective_time <= s.to_time + {window})
        WHERE m.match_kind IS NULL AND {audit.within("m.effective_time")}
        QUALIFY row_number() OVER (PARTITION BY m.commit_row ORDER BY s.to_time, s.run_id) = 1
        """
    )


def foreign_commits(audit: LedgerQueries) -> list[Finding]:
    """Group commits whose offset no request or acknowledgement of a job carries, and no span of a
    run's missed checkpoints holds (``unmatched_commits``): a reset tool (to earliest, latest or any
    offset) or another client committing with the group id, whenever it happened."""
    return [
        Finding.of(
            vocab.FOREIGN_COMMIT,
            vocab.ERROR,
            vocab.OPEN,
            r,
            pick(
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
        for r in unmatched_commits(audit)
        if r["missed_ids"] is None
    ]


def missed_checkpoint_commits(audit: LedgerQueries) -> list[Finding]:
    """Group commits no claim explains that a span of a run's missed checkpoints holds
    (``unmatched_commits``): the job's own commit of a checkpoint whose offsets the ledger never
    read (a Flink sidecar started late or fallen behind). Information, not a FOREIGN_COMMIT: the
    offset and time fit the job's position then, though no recorded request carries that very
    offset, so the evidence names the missed checkpoints and the recorded bounds of the span."""
    return [
        Finding.of(
            vocab.MISSED_CHECKPOINT_COMMIT,
            vocab.INFO,
            vocab.BENIGN,
            r,
            {
                **pick(r, "committed_offset", "commit_time", "record_kind", "log_partition", "log_offset"),
                vocab.DETAIL_MISSED_CHECKPOINTS: r["missed_ids"],
                **pick(r, "from_checkpoint", "from_offset", "to_checkpoint", "to_offset"),
            },
            identity=r["identity"],
            cols=("job_name", "group_id", "topic", "partition", "run_id"),
            offset_start=r["committed_offset"],
        )
        for r in unmatched_commits(audit)
        if r["missed_ids"] is not None
    ]


def commit_mismatches(audit: LedgerQueries) -> list[Finding]:
    """The job's own commit (its request, acknowledgement or raw offset: ``ensure_matched``) of an
    offset other than its checkpoint's normalized one: an engine-dialect bug in the committer, e.g.
    Flink legacy's +1 forgotten. A commit of an offset the job never claimed is no mismatch but a
    FOREIGN_COMMIT, however close in time to the job's own commits it was made.
    """
    audit.ensure_matched()
    bad = audit.rows(
        f"""
        SELECT *, coalesce(checkpoint_offset, requested_offset) AS expected, {IDENTITY_SQL} AS identity
        FROM matched
        WHERE match_kind IS NOT NULL AND {audit.within("effective_time")}
          AND committed_offset != coalesce(checkpoint_offset, requested_offset)
        """
    )
    return [
        Finding.of(
            vocab.COMMIT_MISMATCH,
            vocab.ERROR,
            vocab.OPEN,
            r,
            {
                "match": r["match_kind"],
                **pick(r, "committed_offset", "checkpoint_offset", "requested_offset"),
                "difference": r["committed_offset"] - r["expected"],
                **pick(r, "commit_time", "requested_at"),
            },
            identity=r["identity"],
            offset_start=min(r["committed_offset"], r["expected"]),
            offset_end=max(r["committed_offset"], r["expected"]),
            record_count=abs(r["committed_offset"] - r["expected"]),
        )
        for r in bad
    ]


def commit_regressions(audit: LedgerQueries) -> list[Finding]:
    """The committed offset of a group partition moving backwards, in __consumer_offsets order.

    A tombstone (offset deleted) resets the history: the next commit starts afresh.
    """
    stepped = audit.rows(
        f"""
        WITH ordered AS (
            SELECT *, lag(committed_offset) OVER w AS prev_offset, lag(record_kind) OVER w AS prev_kind,
                   lag(commit_time) OVER w AS prev_time
            FROM gc WHERE record_kind IN ({sql_in(vocab.RECORD_KINDS)})
            WINDOW w AS (PARTITION BY group_id, topic, "partition"
                         ORDER BY coalesce(commit_time, log_time) ASC NULLS FIRST,
                                  log_offset ASC NULLS FIRST)
        )
        SELECT o.*, g.job_name, {IDENTITY_SQL} AS identity
        FROM ordered o LEFT JOIN job_groups g ON o.group_id = g.group_id
        WHERE record_kind != '{vocab.RECORD_TOMBSTONE}' AND prev_kind != '{vocab.RECORD_TOMBSTONE}'
          AND committed_offset < prev_offset
          AND {audit.within("coalesce(commit_time, log_time)")}
        """
    )
    return [
        Finding.of(
            vocab.COMMIT_REGRESSION,
            vocab.ERROR,
            vocab.OPEN,
            r,
            {
                "previous_offset": r["prev_offset"],
                "previous_commit_time": r["prev_time"],
                **pick(r, "committed_offset", "commit_time", "log_partition", "log_offset"),
            },
            identity=r["identity"],
            cols=("job_name", "group_id", "topic", "partition"),
            offset_start=r["committed_offset"],
            offset_end=r["prev_offset"],
            record_count=r["prev_offset"] - r["committed_offset"],
        )
        for r in stepped
    ]


def skipped_commits(audit: LedgerQueries, horizon: datetime | None) -> list[Finding]:
    """Completed checkpoints whose offsets never reached __consumer_offsets, with the reason.

    Reached means: a group commit of that very offset at or after the completion (minus clock
    skew). ``horizon`` is how far group_commits has been ingested (None: never, so nothing is
    judged). A checkpoint is judged once its fate is known by then: a later commit of its job
    covers it (the job commits in order, one at a time, so its own commit cannot come after
    that one), its run has ended (stopped, or the job started again) or it completed a match
    window before the horizon; before that its commit may still be in flight. A skip that a
    later commit covered is therefore reported as soon as that commit is ingested, even by an
    ingest moments after the job stopped. Checkpoints completed in the match window before
    ``since`` are judged again, so one left unjudged at the end of the previous window is not
    lost when the window moves on (the finding ids are the same).

    Whatever the reason (superseded, failed, never attempted), a checkpoint whose offsets a
    later commit of the same job covered (a group commit of that job's own, ``ensure_matched``, at or
    beyond its offset, by the horizon) is benign (info); one nothing covered is a warning;
    commit_disabled is information. A request the ledger infers (a Flink job's, which the sidecar
    does not see: ``detail.inferred``) that a later commit covered is superseded by that commit's
    checkpoint: Flink's committers replace a pending commit by a newer one, and a failed one is named
    as failed by the source's counter.
    """
    if horizon is None:
        return []
    audit.ensure_matched()
    skew, window = sql_secs(audit.rules.clock_skew_s), sql_secs(audit.rules.commit_match_window_s)
    same_tp = (
        'c.group_id = k.group_id AND c.topic = k.topic AND c."partition" = k."partition" '
        f"AND c.effective_time >= k.completed_at - {skew}"
    )
    judged_from = (
        "" if audit.window.since is None else f"AND k.completed_at >= {sql_ts(audit.window.since)} - {window}"
    )
    known_by = sql_ts(horizon)
    key = "job_name, run_id, checkpoint_id"
    superseded = sql_in(vocab.SUPERSEDED_SKIP_REASONS)
    reason = sql_detail(vocab.DETAIL_REASON)
    rows = audit.rows(
        f"""
        WITH candidates AS (
            SELECT k.*, e.ended_at FROM checkpoints k
            LEFT JOIN run_ends e ON k.job_name = e.job_name AND k.run_id = e.run_id
            WHERE k."offset" IS NOT NULL AND k.completed_at < {sql_ts(audit.window.until)} {judged_from}
              AND NOT EXISTS (SELECT 1 FROM commits c WHERE {same_tp} AND c.committed_offset = k."offset")
        ), covering AS (
            SELECT k.job_name, k.run_id, k.checkpoint_id, k.topic, k."partition",
                   min(c.effective_time) AS covered_at,
                   arg_min_null(c.committed_offset, c.effective_time) AS covered_by_offset,
                   arg_min_null(c.checkpoint_id, c.effective_time) AS covered_by_checkpoint
            FROM candidates k JOIN matched c
              ON {same_tp} AND c.committed_offset >= k."offset" AND c.job_name = k.job_name
             AND c.effective_time <= {known_by}
            GROUP BY k.job_name, k.run_id, k.checkpoint_id, k.topic, k."partition"
        ), unreached AS (
            -- Judged once its fate is known: covered (the job commits in order, one at a time, so
            -- its own commit can no longer follow), or old enough, or its run over, by the horizon.
            SELECT k.* EXCLUDE (ended_at) FROM candidates k
            WHERE k.completed_at + {window} <= {known_by}
               OR (k.ended_at IS NOT NULL AND k.ended_at + {skew} <= {known_by})
               OR EXISTS (SELECT 1 FROM covering v WHERE v.job_name = k.job_name AND v.run_id = k.run_id
                            AND v.checkpoint_id = k.checkpoint_id AND v.topic = k.topic
                            AND v."partition" = k."partition")
        ), events AS (
            SELECT * FROM ledger WHERE checkpoint_id IS NOT NULL
        ), skipped AS (
            -- The first reason is the cause (an evicted checkpoint is later also an unknown one);
            -- the checkpoint that took its place: the one whose request replaced it in the commit
            -- slot (superseded_by) or whose snapshot pushed it out of the pending ones (evicted_by).
            SELECT {key},
                   arg_min_null({reason}, {{'t': event_time, 'r': {reason}}}) AS skip_reason,
                   max(coalesce({sql_detail(vocab.DETAIL_SUPERSEDED_BY)},
                                {sql_detail(vocab.DETAIL_EVICTED_BY)})) AS superseded_by
            FROM events WHERE event_type = '{vocab.EVENT_COMMIT_SKIPPED}' GROUP BY {key}
        ), failed AS (
            SELECT {key}, topic, "partition", max({sql_detail(vocab.DETAIL_ERROR)}) AS error
            FROM events WHERE event_type = '{vocab.EVENT_COMMIT_FAILED}' GROUP BY {key}, topic, "partition"
        ), outcome AS (
            SELECT {key}, topic, "partition",
                   bool_or(event_type = '{vocab.EVENT_COMMIT_REQUESTED}') AS requested,
                   bool_or(event_type = '{vocab.EVENT_COMMIT_SUCCEEDED}') AS acknowledged,
                   bool_or(event_type = '{vocab.EVENT_COMMIT_REQUESTED}'
                           AND {sql_detail(vocab.DETAIL_INFERRED)} = 'true') AS inferred
            FROM events
            WHERE event_type IN ('{vocab.EVENT_COMMIT_REQUESTED}', '{vocab.EVENT_COMMIT_SUCCEEDED}')
            GROUP BY {key}, topic, "partition"
        ), discarded AS (
            -- Later completions list the pending checkpoints they dropped; such a checkpoint
            -- that still completed was superseded even when no COMMIT_SKIPPED row names it.
            SELECT job_name, run_id, checkpoint_id, min(discarded_by) AS discarded_by FROM (
                SELECT job_name, run_id, checkpoint_id AS discarded_by,
                       unnest(TRY_CAST({sql_detail(vocab.DETAIL_DISCARDED_PENDING)} AS BIGINT[]))
                           AS checkpoint_id
                FROM events WHERE event_type = '{vocab.EVENT_CHECKPOINT_COMPLETED}'
            ) GROUP BY job_name, run_id, checkpoint_id
        ), joined AS (
            SELECT u.*, s.skip_reason, s.superseded_by, d.discarded_by, f.error, o.requested,
                   o.acknowledged, o.inferred, v.covered_at, v.covered_by_offset, v.covered_by_checkpoint
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
            -- A request the job makes by design, unseen (Flink's, written by flink-watch), that a
            -- later commit of the job covered: a newer checkpoint's commit took its place (the
            -- legacy consumer's "Skipping commit of previous offsets"), as a failure is named above.
            WHEN inferred AND covered_at IS NOT NULL THEN '{vocab.SKIPPED_SUPERSEDED}'
            WHEN acknowledged THEN '{vocab.SKIPPED_ACKNOWLEDGED_NOT_FOUND}'
            ELSE '{vocab.SKIPPED_NEVER_ATTEMPTED}' END AS reason
        FROM joined
        """
    )
    out: list[Finding] = []
    for r in rows:
        benign = r["covered_at"] is not None
        superseded_by = to_int(r["superseded_by"])
        if superseded_by is None and r["inferred"] and benign and r["reason"] == vocab.SKIPPED_SUPERSEDED:
            superseded_by = to_int(r["covered_by_checkpoint"])
        out.append(
            Finding.of(
                vocab.SKIPPED_COMMIT,
                vocab.INFO if benign or r["reason"] == vocab.SKIPPED_DISABLED else vocab.WARN,
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


def committed_ahead(audit: LedgerQueries) -> list[Finding]:
    """The group's latest committed offset beyond every checkpoint completed before ``until``."""
    until = sql_ts(audit.window.until)
    ahead = audit.rows(
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
        Finding.of(
            vocab.COMMITTED_AHEAD,
            vocab.CRITICAL,
            vocab.OPEN,
            r,
            {
                **pick(r, "committed_offset", "commit_time"),
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
