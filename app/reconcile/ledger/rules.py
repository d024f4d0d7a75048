"""Findings from the ledger alone (CONTRACTS.md section 5): LEDGER_INCONSISTENT (a ledger that
contradicts itself) and UNCLEAN_STOP (a run that ended without RUN_STOPPED)."""

from __future__ import annotations

from app.contracts import vocabulary as vocab
from app.contracts.instants import instant
from app.reconcile.findings import Finding
from app.reconcile.ledger.queries import LedgerQueries
from app.reconcile.ledger.sql import sql_secs


def ledger_inconsistencies(audit: LedgerQueries) -> list[Finding]:
    """Completed without a snapshot of the same checkpoint in any run of the job; snapshot
    offsets moving backwards in a run.

    Snapshot and completion pair by job and checkpoint id, not by run: a batch planned by a
    run that was killed and completed by its successor is consistent (the successor's own
    snapshot of the re-run batch is dropped by the ledger's idempotent append for that batch).
    A run that never stopped is not an inconsistency but an UNCLEAN_STOP (``unclean_stops``).
    """
    no_snapshot = audit.rows(
        f"""
        WITH completions AS (
            SELECT job_name, run_id, checkpoint_id, min(event_time) AS completed_at,
                   max(group_id) AS group_id
            FROM ledger WHERE event_type = '{vocab.EVENT_CHECKPOINT_COMPLETED}'
            GROUP BY job_name, run_id, checkpoint_id
        )
        SELECT * FROM completions c
        WHERE {audit.within("c.completed_at")} AND NOT EXISTS (
            SELECT 1 FROM ledger s WHERE s.event_type = '{vocab.EVENT_CHECKPOINT_SNAPSHOT}'
              AND s.job_name = c.job_name AND s.checkpoint_id = c.checkpoint_id)
        """
    )
    backwards = audit.rows(
        f"""
        WITH stepped AS (
            SELECT *, lag("offset") OVER w AS prev_offset, lag(checkpoint_id) OVER w AS prev_checkpoint
            FROM ledger
            WHERE event_type = '{vocab.EVENT_CHECKPOINT_SNAPSHOT}' AND "partition" IS NOT NULL
              AND "offset" IS NOT NULL
            WINDOW w AS (PARTITION BY job_name, run_id, topic, "partition"
                         ORDER BY checkpoint_id, event_time)
        )
        SELECT * FROM stepped WHERE "offset" < prev_offset AND {audit.within("event_time")}
        """
    )
    kind = "completed_without_snapshot"
    out = [
        Finding.of(
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
        Finding.of(
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


def unclean_stops(audit: LedgerQueries) -> list[Finding]:
    """Runs that never wrote RUN_STOPPED: killed or crashed.

    Judged when the job's next run started inside the window, or, for a job's last run, when
    it has been silent for ``run_silence_s`` by the window's end (before that it may be a live
    job with no new data). Info when the next run resumed exactly on every partition: the crash
    cost nothing. Otherwise warn; the impact itself is carried by the RESTART_*, GAP and
    DUPLICATE findings of that restart.
    """
    silence = sql_secs(audit.rules.run_silence_s)
    silent_until = f"last_event_at + {silence}"
    rows = audit.rows(
        f"""
        SELECT * FROM run_ends
        WHERE stopped_at IS NULL AND (
            (next_run_id IS NOT NULL AND {audit.within("next_started_at")})
            OR (next_run_id IS NULL AND {audit.within(silent_until)}))
        """
    )
    classes: dict[tuple[str, str], set[str]] = {}
    for restart in audit.restarts() if rows else []:
        key = (restart["job_name"], restart["run_id"])
        classes.setdefault(key, set()).add(restart["classification"])
    out: list[Finding] = []
    for r in rows:
        resumed = classes.get((r["job_name"], r["next_run_id"]), set()) if r["next_run_id"] else set()
        exact = resumed == {vocab.RESTART_EXACT}
        out.append(
            Finding.of(
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
                        else round((audit.window.until - instant(r["last_event_at"])).total_seconds())
                    ),
                },
                cols=("job_name", "group_id", "run_id"),
            )
        )
    return out
