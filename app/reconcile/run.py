"""`reconcile` end to end: read the window's inputs, audit the ledger and the commits on the driver,
examine the sink, confirm suspected gaps, group incidents, then store.

Nothing is written until everything is known. The stores are then separate Delta commits, each
safe to repeat: findings and incidents are MERGEd by their deterministic ids (a rerun writes the
same rows), the partition summary is one append, and the run record comes last: it alone moves the
next default window. A run killed between them leaves rows its rerun overwrites, and summaries of
a run that never recorded itself are dropped by the next run (``outputs.drop_orphan_summaries``)."""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession

from app.config import AppConfig
from app.contracts.findings import StoredFinding
from app.contracts.tables import PARTITION_SUMMARY_SCHEMA
from app.contracts.vocabulary import (
    BATCH_SINK_MODES,
    COMMAND_RECONCILE,
    DETAIL_EXTERNAL_PATH,
    DETAIL_FLINK_JOB_ID,
    DETAIL_QUERY_ID,
    DUPLICATE,
    EVENT_RUN_STARTED,
    RESTART_SKIPPED,
    SEVERITIES,
    SINK_COORDINATES,
    SINK_DELTA_BATCHES,
    SINK_ICEBERG_SNAPSHOTS,
    SINK_NONE,
    severity_at_least,
)
from app.errors import (
    ConfigError,
    KafkaUnavailableError,
    error_kind,
)
from app.incidents import grouping as incidents
from app.incidents.incident import StoredIncident
from app.incidents.io import merge_incidents, open_incident_findings, resolved_incidents
from app.kafka.gaps import GapConfirmer, SuspectedGap
from app.kafka.times import SourceTimes
from app.reconcile import findings as rc
from app.reconcile.completeness.table import CompletenessPass, completeness_rows, store_completeness
from app.reconcile.findings import Finding, PartitionRange
from app.reconcile.forensics import restarts as fx
from app.reconcile.forensics.observed import observed_in_restart_ranges
from app.reconcile.inputs import match_rules, open_ledger_audit
from app.reconcile.ledger import audit as la
from app.reconcile.outputs import (
    AuditRun,
    drop_orphan_summaries,
    merge_findings,
    record_failed_run,
    record_run,
    resolve_scope,
)
from app.reconcile.sink import batches as sb
from app.reconcile.sink import snapshots as snap
from app.reconcile.sink.coordinates import (
    SinkReader,
    _rows_to_ranges,
    examine_sink,
    sink_columns,
)
from app.reconcile.sink.offsets import PartitionSink
from app.storage.handles import DELTA, FORMAT_NAMES, ICEBERG, AuditTables

log = logging.getLogger(__name__)

# The key of an attached run's RUN_STARTED detail that holds its query's id: the txn app id of
# Spark's Delta sink (CONTRACTS.md section 4).


def _completed_offsets(ranges: Sequence[PartitionRange]) -> dict[tuple[str, str, int], int]:
    """(job, topic, partition) -> the highest offset a completed checkpoint vouches for: where a
    restart from group offsets must resume to be exact."""
    return {
        (r.job_name, r.topic, r.partition): r.beyond_from if r.beyond_from is not None else r.hi
        for r in ranges
    }


@dataclass
class ReconcileResult:
    run_id: str
    window: rc.AuditWindow
    jobs: list[str]
    partitions: int = 0
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (finding_type, severity) -> n
    # Of ``counts``, the findings of incidents that stay resolved: made good, they fail no run.
    settled: dict[tuple[str, str], int] = field(default_factory=dict)
    new_findings: int = 0
    gaps_suspected: int = 0
    confirmation: str = "not needed"
    top: list[StoredFinding] = field(default_factory=list)
    seconds: float = 0.0
    sink_seconds: float = 0.0  # of `seconds`, spent reading the sink
    incidents: list[StoredIncident] = field(default_factory=list)
    audited_jobs: list[str] = field(default_factory=list)  # the jobs the window held
    completeness_windows: int | None = None  # window rows written; None: no source to ask

    def worst(self) -> str | None:
        present = {sev for (_, sev), n in self.counts.items() if n}
        return next((s for s in SEVERITIES if s in present), None)

    def failing(self, fail_on: str) -> int:
        """The findings at or above ``fail_on`` outside incidents that stay resolved."""
        return failing_findings(self.counts, self.settled, fail_on)


def failing_findings(
    counts: Mapping[tuple[str, str], int], settled: Mapping[tuple[str, str], int], fail_on: str
) -> int:
    """How many of ``counts`` ((type, severity) -> n) fail a run at ``fail_on``: those at or above
    it, less the ``settled`` ones (findings of incidents a repair resolved)."""
    return sum(n - settled.get(key, 0) for key, n in counts.items() if severity_at_least(key[1], fail_on))


def run_reconcile(
    spark: SparkSession,
    cfg: AppConfig,
    run: AuditRun,
    confirmer: GapConfirmer | None = None,
    times: SourceTimes | None = None,
    tables: AuditTables | None = None,
) -> ReconcileResult:
    """The whole reconciliation: read, detect, confirm gaps, MERGE findings, write partition_summary.

    ``confirmer`` None leaves gaps 'open' and says so in their evidence. ``times`` (the source's
    offsets by time) None leaves the completeness table as it is: its windows cannot be mapped. An
    audit that cannot see (a missing sink table: ConfigError; Kafka unreachable for confirmation,
    storage, Spark: InfrastructureError) raises before it writes any finding, and its run never
    moves the window.
    """
    started = time.monotonic()
    r = cfg.reconcile
    scope = resolve_scope(spark, cfg, run, COMMAND_RECONCILE, tables)
    tables, job_list, window, now, run_id = scope.tables, scope.jobs, scope.window, run.now, run.run_id
    rules = match_rules(r)
    result = ReconcileResult(run_id=run_id, window=window, jobs=job_list)
    try:
        audit = open_ledger_audit(
            tables, window, rules, job_list, r.groups, r.baseline_lookback_days, scope.ledger_version
        )
        try:
            _reconcile_inputs(_Pass(spark, cfg, tables, audit, result, now, confirmer, times))
        finally:
            audit.close()
    except Exception as exc:  # broad on purpose: a run that could not see is recorded, then re-raised
        if error_kind(exc) != "usage":  # a usage error (a missing sink) writes nothing at all
            record_failed_run(scope, run, COMMAND_RECONCILE)
        raise
    record_run(scope, run, COMMAND_RECONCILE, now + timedelta(seconds=time.monotonic() - started))
    result.seconds = time.monotonic() - started
    return result


@dataclass(frozen=True)
class _Pass:
    """What one reconcile pass works with, handed to its steps as one value."""

    spark: SparkSession
    cfg: AppConfig
    tables: AuditTables
    audit: la.LedgerAudit
    result: ReconcileResult
    now: datetime
    confirmer: GapConfirmer | None
    times: SourceTimes | None


def _reconcile_inputs(p: _Pass) -> None:
    tables, audit, result, now = p.tables, p.audit, p.result, p.now
    started = time.monotonic()
    ledger_local = rc.finalize_findings(audit.all_findings(), result.run_id, now)
    log.info("ledger and commit findings: %d in %.1fs", len(ledger_local), time.monotonic() - started)
    sink_local, ranges, stats = _sink_and_restart_findings(p)
    local = rc.one_per_finding_id([*ledger_local, *sink_local])
    jobs = sorted({r.job_name for r in ranges} | {f.job_name for f in local if f.job_name})
    # Open incidents keep their earlier windows' findings; only this run's findings are stored.
    earlier = open_incident_findings(tables, jobs, {f.finding_id for f in local})
    found = incidents.group_findings([*local, *earlier])
    built = incidents.to_incidents(found, result.run_id, _completed_offsets(ranges))
    result.incidents = incidents.carry_resolution(built, resolved_incidents(tables))
    settled = incidents.settled_findings(built, result.incidents)
    result.audited_jobs = jobs
    windows = _completeness(p, local)
    # Everything is known before the first write: a failure above leaves the tables untouched.
    drop_orphan_summaries(tables)
    merge_findings(tables.findings, local)
    merge_incidents(tables.incidents, result.incidents)
    result.top = sorted(local, key=rc.finding_order)[:10]
    by_type: dict[tuple[str, str, int], dict[str, int]] = defaultdict(dict)
    for f in local:
        key = (f.finding_type, f.severity)
        result.counts[key] = result.counts.get(key, 0) + 1
        if f.finding_id in settled:
            result.settled[key] = result.settled.get(key, 0) + 1
        if f.job_name is not None and f.topic is not None and f.partition is not None:
            tp_counts = by_type[(f.job_name, f.topic, f.partition)]
            tp_counts[f.finding_type] = tp_counts.get(f.finding_type, 0) + 1
    # Only a coordinates sink's rows are counted; another mode's counts are unknown, not zero.
    uncounted = {
        rng.job_name for rng in ranges if p.cfg.reconcile.sink_mode_for(rng.job_name) != SINK_COORDINATES
    }
    summary = _Summary(ranges, stats, by_type, audit.latest_commits(), frozenset(uncounted))
    _write_summary(tables, result.run_id, summary)
    if windows is not None:
        result.completeness_windows = store_completeness(tables, windows)


def _completeness(p: _Pass, local: Sequence[StoredFinding]) -> list[dict[str, Any]] | None:
    """The completeness rows of the windows not yet final, or None when the source cannot be asked:
    the table then stays as it is and the next run computes the same windows (a run's window of
    findings does not bound them), so a broker away for a while costs the table no window."""
    if p.times is None:
        return None
    try:
        return completeness_rows(
            CompletenessPass(
                p.spark, p.cfg, p.tables, p.audit, p.result.run_id, p.now, p.confirmer, p.times, local
            )
        )
    except KafkaUnavailableError as exc:
        log.warning("completeness not computed this run, the source could not be read: %s", exc)
        return None


def _sink_and_restart_findings(
    p: _Pass,
) -> tuple[list[StoredFinding], list[PartitionRange], dict[tuple[str, str, int], PartitionSink]]:
    """GAP, DUPLICATE, SINK_BEYOND_CHECKPOINT and RESTART_* findings, finalized as local rows, with
    the covered ranges and the sink's statistics per partition."""
    spark, tables, audit, result, confirmer = p.spark, p.tables, p.audit, p.result, p.confirmer
    # The sink, job by job (each job may have its own sink table).
    ranges = _rows_to_ranges(audit.coverage())
    result.partitions = len(ranges)
    active = audit.active_runs()
    by_job: dict[str, list[PartitionRange]] = defaultdict(list)
    for rng in ranges:
        by_job[rng.job_name].append(rng)
    restart_rows = audit.restarts()
    sink_rows: list[Finding] = []
    stats: dict[tuple[str, str, int], PartitionSink] = {}
    gaps: list[tuple[PartitionRange, int, int]] = []
    observed: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    cols = sink_columns(p.cfg)
    sink_started = time.monotonic()
    for job in sorted(set(by_job) | {r["job_name"] for r in restart_rows}):
        mode = p.cfg.reconcile.sink_mode_for(job)
        if mode == SINK_NONE:
            continue  # ledger x group commits only: the sink is not read at all
        if mode in BATCH_SINK_MODES:
            sink_rows += _batch_findings(p, job, mode)
            continue
        sink_table = tables.sink_for(job)
        df = sink_table.scan()
        if df is None:
            # Not an empty sink: the audit cannot see, so it claims nothing (CONTRACTS.md section 5).
            raise ConfigError(
                tables.sink_key_for(job),
                f"no {FORMAT_NAMES[sink_table.table_format]} table at {sink_table.location} (the sink "
                f"of job {job}); nothing was written",
            )
        sink = SinkReader(df, cols)
        outcome = examine_sink(spark, sink, by_job.get(job, []), active.get(job))
        sink_rows += outcome.rows
        stats.update(outcome.stats)
        gaps += outcome.gaps
        observed.update(
            observed_in_restart_ranges(spark, sink, [r for r in restart_rows if r["job_name"] == job])
        )

    result.sink_seconds = time.monotonic() - sink_started
    result.gaps_suspected = len(gaps)
    # A restart's skipped range in a sink that cannot show missing records is read back as a gap is:
    # the records it never read are lost whatever the sink.
    skips = [r for r in restart_rows if _judged_from_source(p.cfg, r)]
    suspected = [SuspectedGap(g.topic, g.partition, s, e) for g, s, e in gaps] + [
        SuspectedGap(r["topic"], r["partition"], *fx.restart_range(r)) for r in skips
    ]
    verdicts: list[dict[str, Any] | None] = [None] * len(suspected)
    if suspected and confirmer is not None:
        # A failure here propagates: unconfirmed gaps written as findings would claim a loss the
        # audit could not check, and the next run must look at them again.
        verdicts = list(confirmer(suspected))
        result.confirmation = f"{len(gaps)} gap(s) and {len(skips)} skipped range(s) read back from Kafka"
    elif suspected:
        result.confirmation = "disabled: gaps left open"
    judged = [(rng, start, end, v) for (rng, start, end), v in zip(gaps, verdicts[: len(gaps)], strict=True)]
    sink_rows += rc.gap_findings(judged)
    read_back = {fx.restart_key(r): v for r, v in zip(skips, verdicts[len(gaps) :], strict=True)}

    core = [
        *fx.find_restart_anomalies(restart_rows, observed, read_back),
        *_with_copy_dates(audit, sink_rows),
    ]
    return rc.finalize_findings(core, result.run_id, p.now), ranges, stats


def _judged_from_source(cfg: AppConfig, restart: Mapping[str, Any]) -> bool:
    """A skip of a job whose sink cannot show missing records (`delta_batches`, `iceberg_snapshots`,
    `none`); a `coordinates` sink's GAPs inside the skipped range tell what it lacks (and a repair
    mends)."""
    return (
        restart["classification"] == RESTART_SKIPPED
        and cfg.reconcile.sink_mode_for(restart["job_name"]) != SINK_COORDINATES
    )


def _batch_findings(p: _Pass, job: str, mode: str) -> list[Finding]:
    """``job``'s completed batches against its sink's log: a Delta sink's commits
    (app.reconcile.sink.batches), an Iceberg sink's snapshots (app.reconcile.sink.snapshots)."""
    r, window, sink = p.cfg.reconcile, p.audit.window, p.tables.sink_for(job)
    iceberg = mode == SINK_ICEBERG_SNAPSHOTS
    _require_format(p, job, mode, ICEBERG if iceberg else DELTA)
    since = None if window.since is None else window.since - timedelta(days=r.baseline_lookback_days)
    whole = sink.sink_log(since)
    if whole is None:
        # Not an empty sink: the audit cannot see, so it claims nothing (CONTRACTS.md section 5).
        kind = "Iceberg" if iceberg else "Delta"
        where = f"no {kind} table at {sink.location} (the sink of job {job}); nothing was written"
        raise ConfigError(p.tables.sink_key_for(job), where)
    checkpoints = [c for c in p.audit.checkpoints() if c["job_name"] == job]
    fixed = r.sink_app_id_by_job.get(job)
    query_ids = p.audit.run_detail(DETAIL_QUERY_ID)
    # A Flink job's snapshots name its Flink job id (iceberg_snapshots only: Delta has no Flink sink here).
    flink_ids = {k: v for k, v in p.audit.run_detail(DETAIL_FLINK_JOB_ID).items() if iceberg and k[0] == job}
    app_ids = {
        run: app_id
        for run in {str(c["run_id"]) for c in checkpoints}
        if (app_id := fixed or query_ids.get((job, run)) or flink_ids.get((job, run))) is not None
    }
    if checkpoints and not app_ids:
        log.warning(
            "job %s: no txn app id is known (no query id in its runs' %s, no "
            "reconcile.sink_app_id_by_job.%s): its sink commits cannot be tied to its batches",
            job,
            EVENT_RUN_STARTED,
            job,
        )
    restored = {(run, t, part): o for (j, run, t, part), o in p.audit.restored_offsets().items() if j == job}
    batches = sb.batches_of(checkpoints, app_ids, restored, _queries(job, query_ids, p.audit.run_starts()))
    in_flight: dict[str, int] = {}
    unsettled: dict[str, int] = {}
    active = p.audit.active_runs().get(job)
    if active is not None:
        # A running job commits a batch to the sink before its checkpoint completes.
        for b in batches:
            in_flight[b.app_id] = max(in_flight.get(b.app_id, 0), b.batch_id + 1)
        if (job, active) in flink_ids:
            # Flink commits a checkpoint to Iceberg once it completed: the newest may not be there yet.
            unsettled[flink_ids[(job, active)]] = in_flight.get(flink_ids[(job, active)], 1) - 1
    if not iceberg:
        return sb.batch_findings(batches, whole, window, in_flight)
    restored_runs = {run for (j, run) in p.audit.run_detail(DETAIL_EXTERNAL_PATH) if j == job}
    flink_runs = {run for _, run in flink_ids}
    return snap.snapshot_findings(
        batches, whole, window, since, flink_runs, restored_runs, in_flight, unsettled
    )


def _require_format(p: _Pass, job: str, mode: str, expected: str) -> None:
    """Fail, naming the mode's key, when ``job``'s sink is of another format than its mode reads."""
    sink = p.tables.sink_for(job)
    if sink.table_format == expected or (expected == ICEBERG and not sink.exists()):
        return  # a missing Iceberg sink is said as a missing sink is
    by_job = job in p.cfg.reconcile.sink_mode_by_job
    key = f"reconcile.sink_mode_by_job.{job}" if by_job else "reconcile.sink_mode"
    fitting = SINK_ICEBERG_SNAPSHOTS if sink.table_format == ICEBERG else SINK_DELTA_BATCHES
    raise ConfigError(
        key,
        f"sink mode {mode} reads a {expected} sink; the sink of job {job} ({sink.location}) is "
        f"{sink.table_format}: set {fitting}",
    )


def _queries(
    job: str, query_ids: Mapping[tuple[str, str], str], starts: Mapping[tuple[str, str], datetime]
) -> dict[str, tuple[str, datetime | None]]:
    """``job``'s runs -> their query's id and when that query first started: the earliest start of
    all its runs (a restart after a crash continues the query, and the dead run's sink commits
    predate the new run's start)."""
    runs = {run: q for (j, run), q in query_ids.items() if j == job}
    first: dict[str, datetime] = {}
    for run, q in runs.items():
        started = starts.get((job, run))
        if started is not None and (q not in first or started < first[q]):
            first[q] = started
    return {run: (q, first.get(q)) for run, q in runs.items()}


def _with_copy_dates(audit: la.LedgerAudit, found: Sequence[Finding]) -> list[Finding]:
    """The findings with every DUPLICATE dated and its writer runs named from the ledger
    (``findings.dated_duplicate``): the evidence time its incident and the impact chart need."""
    dups = [f for f in found if f.finding_type == DUPLICATE]
    dated = [rc.dated_duplicate(f, d) for f, d in zip(dups, audit.copy_dates(dups), strict=True)]
    return [*(f for f in found if f.finding_type != DUPLICATE), *dated]


@dataclass(frozen=True)
class _Summary:
    """What the partition summary of a run is made of: the ranges, the sink's statistics (of the
    jobs not in ``uncounted``), the findings by type and the group's latest commits."""

    ranges: Sequence[PartitionRange]
    stats: Mapping[tuple[str, str, int], PartitionSink]
    by_type: Mapping[tuple[str, str, int], Mapping[str, int]]
    latest: Mapping[tuple[str | None, str, int], tuple[int | None, datetime | None]]
    uncounted: frozenset[str]


def _write_summary(tables: AuditTables, run_id: str, summary: _Summary) -> None:
    ranges, stats, by_type, latest = summary.ranges, summary.stats, summary.by_type, summary.latest
    rows = []
    for rng in ranges:
        ps = stats.get((rng.job_name, rng.topic, rng.partition), PartitionSink())
        counted = rng.job_name not in summary.uncounted
        committed, commit_time = latest.get((rng.group_id, rng.topic, rng.partition), (None, None))
        lag = (
            None
            if committed is None or rng.last_checkpoint_offset is None
            else rng.last_checkpoint_offset - committed
        )
        lag_s = (
            None
            if commit_time is None or rng.last_completed_at is None
            else int((rng.last_completed_at - commit_time).total_seconds())
        )
        rows.append(
            (
                run_id,
                rng.job_name,
                rng.group_id,
                rng.topic,
                rng.partition,
                ps.rows if counted else None,
                ps.distinct if counted else None,
                ps.min_offset,
                ps.max_offset,
                rng.last_checkpoint_id,
                rng.last_checkpoint_offset,
                committed,
                commit_time,
                lag,
                lag_s,
                json.dumps(dict(sorted(by_type.get((rng.job_name, rng.topic, rng.partition), {}).items()))),
            )
        )
    # One append is one Delta commit: a run killed before it leaves nothing half-written.
    names = PARTITION_SUMMARY_SCHEMA.fieldNames()
    tables.partition_summary.append([dict(zip(names, row, strict=True)) for row in rows])
