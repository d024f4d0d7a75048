"""The small inputs of `reconcile` and `forensics`, read into Arrow on the driver: the ledger window
and the commits, opened as one ``LedgerAudit`` (``open_ledger_audit``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from app.config import ReconcileConfig
from app.contracts.instants import instant
from app.contracts.tables import GROUP_COMMITS_SCHEMA, LEDGER_SCHEMA
from app.reconcile import findings as rc
from app.reconcile.ledger import audit as la
from app.storage.handles import AuditTables, TableHandle

log = logging.getLogger(__name__)


def read_ledger_rows(
    ledger: TableHandle,
    window: rc.AuditWindow,
    jobs: Sequence[str],
    lookback_days: int,
    version: int | None = None,
) -> pa.Table:
    """The window's ledger (with its look-back) as one Arrow table for the driver-side analysis, as
    of ``version`` (the run's pinned one; None: the newest).

    delta-rs reads it, on every storage (about half a second for 800K rows, where a first Spark
    read plus conversion took 13 s).
    """
    dataset = ledger.dataset(version)
    if dataset is None:
        return to_arrow_schema(LEDGER_SCHEMA).empty_table()
    keep = pc.scalar(True)
    if window.since is not None:
        keep = pc.field("event_date") >= pc.scalar((window.since - timedelta(days=lookback_days)).date())
    if jobs:
        keep = keep & pc.field("job_name").isin(list(jobs))
    return dataset.to_table(filter=keep)


def read_group_commit_rows(
    group_commits: TableHandle, window: rc.AuditWindow, groups: Sequence[str], lookback_days: int
) -> pa.Table:
    """The groups' commits (with the look-back) as one Arrow table, read as read_ledger_rows."""
    dataset = group_commits.dataset()
    if dataset is None or not groups:
        return to_arrow_schema(GROUP_COMMITS_SCHEMA).empty_table()
    wanted = pc.field("group_id").isin(list(groups))
    if window.since is None:
        return dataset.to_table(filter=wanted)
    first = pa.scalar(
        window.since - timedelta(days=lookback_days), type=dataset.schema.field("commit_time").type
    )
    # The same rows as the exact filter below, on commit_time alone: pushed into the scan, the files'
    # min/max statistics skip every file committed before the window, so a night reads its window's
    # files, not the whole history.
    in_window = (pc.field("commit_time") >= first) | pc.field("commit_time").is_null()
    rows = dataset.to_table(filter=wanted & in_window)
    when = pc.coalesce(rows.column("commit_time"), rows.column("log_time"))
    return rows.filter(pc.or_kleene(pc.is_null(when), pc.greater_equal(when, first)))


def match_rules(r: ReconcileConfig) -> rc.MatchRules:
    return rc.MatchRules(r.commit_match_window_s, r.clock_skew_s, r.run_silence_s)


def last_ingest_time(ingest_positions: TableHandle) -> datetime | None:
    """When ingest-offsets last stored its positions: group_commits holds every commit made
    before then, which is what lets a stopped job's last checkpoints be judged."""
    rows = ingest_positions.read_columns(["updated_at"]) or []
    times = [instant(r["updated_at"]) for r in rows if r["updated_at"] is not None]
    return max(times, default=None)


def open_ledger_audit(
    tables: AuditTables,
    window: rc.AuditWindow,
    rules: rc.MatchRules,
    jobs: Sequence[str],
    groups: Sequence[str],
    lookback_days: int,
    version: int | None = None,
) -> la.LedgerAudit:
    """The window's ledger and the group's commits, read once and loaded for the driver-side
    analysis (app.reconcile.ledger.audit): they are small next to the sink, which alone Spark scans."""
    started = time.monotonic()
    ledger = read_ledger_rows(tables.ledger, window, jobs, lookback_days, version)
    group_list = sorted(set(groups) or la.ledger_groups(ledger))
    commits = read_group_commit_rows(tables.group_commits, window, group_list, lookback_days)
    log.info(
        "ledger window: %d ledger rows, %d group commits of %d group(s), read in %.1fs",
        ledger.num_rows,
        commits.num_rows,
        len(group_list),
        time.monotonic() - started,
    )
    return la.LedgerAudit(ledger, commits, window, rules, last_ingest_time(tables.ingest_positions))
