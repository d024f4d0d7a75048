"""Reconciliation of the three accounts (ledger, group commits, sink): the findings the rules build.

Sink-derived findings (GAP, DUPLICATE, SINK_BEYOND_CHECKPOINT) start from small per-bucket
aggregates that the I/O module collects, so their range arithmetic is plain Python and testable
without a JVM. Everything read from the ledger and the group's commits (ledger- and
commit-derived findings, completed checkpoints, the ranges the sink must hold, restarts) lives in
app/reconcile/ledger/audit.py: those inputs are small, so they are analysed on the driver.

Every rule returns typed ``Finding``s, built by ``Finding.of``: the contract's columns minus the run
id and detection time, plus ``identity``, a string that together with the coordinates makes the
finding unique. ``finalize_findings`` turns them into ``StoredFinding``s
(``app.contracts.findings``: a row of the ``findings`` contract and its id), what everything
downstream takes.

Internal frames use canonical names: the sink is renamed by the I/O module to ``topic, partition,
offset, writer_checkpoint_id, writer_run_id``.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
)

from app.contracts.findings import ADDED_WHEN_STORED, StoredFinding, evidence_json, finding_id
from app.contracts.instants import instant
from app.contracts.tables import FINDINGS_SCHEMA
from app.contracts.vocabulary import (
    BENIGN,
    CONFIRMED,
    CRITICAL,
    DUPLICATE,
    ERROR,
    GAP,
    INFO,
    OPEN,
    SEVERITIES,
    SINK_BEYOND_CHECKPOINT,
    UNVERIFIABLE,
    WARN,
)

# The findings contract minus what finalize_findings adds (id, run, time), plus the identity the id
# is hashed from: derived, so the contract stays in app/contracts/tables.py alone.
FINDING_CORE_SCHEMA: Final = StructType(
    [f for f in FINDINGS_SCHEMA.fields if f.name not in ADDED_WHEN_STORED]
    + [StructField("identity", StringType(), True)]
)
FINDING_CORE: Final = tuple(FINDING_CORE_SCHEMA.fieldNames())

# Where a finding is: what the one builder (``Finding.of``) picks from a source row.
COORDINATES: Final = ("job_name", "group_id", "topic", "partition", "run_id", "checkpoint_id")


@dataclass(frozen=True)
class Finding:
    """One finding as the rules produce it: the findings contract minus what a run adds when it
    stores it (the id, its run id and time), plus ``identity``, which with the coordinates makes
    the finding unique. Evidence stays a mapping until it is stored."""

    finding_type: str
    severity: str
    status: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    job_name: str | None = None
    group_id: str | None = None
    topic: str | None = None
    partition: int | None = None
    run_id: str | None = None
    checkpoint_id: int | None = None
    offset_start: int | None = None
    offset_end: int | None = None
    record_count: int | None = None
    identity: str = ""

    @classmethod
    def of(
        cls,
        finding_type: str,
        severity: str,
        status: str,
        where: Mapping[str, Any],
        evidence: Mapping[str, Any],
        *,
        identity: str = "",
        cols: Sequence[str] = COORDINATES,
        offset_start: int | None = None,
        offset_end: int | None = None,
        record_count: int | None = None,
    ) -> Finding:
        """The one builder: coordinates in ``cols`` are taken from ``where``, the others are null;
        naive times in the evidence are UTC wall times (DuckDB's), stored as instants."""
        coordinates = {c: where.get(c) if c in cols else None for c in COORDINATES}
        return cls(
            finding_type=finding_type,
            severity=severity,
            status=status,
            evidence={k: instant(v) for k, v in evidence.items()},
            offset_start=offset_start,
            offset_end=offset_end,
            record_count=record_count,
            identity=identity,
            **coordinates,
        )

    def core_row(self) -> dict[str, Any]:
        """The FINDING_CORE row: contract columns minus id, run and time, evidence as JSON."""
        row = {name: getattr(self, name) for name in FINDING_CORE}
        row["evidence"] = evidence_json(self.evidence)
        return row

    @property
    def finding_id(self) -> str:
        return finding_id(self.core_row())


@dataclass(frozen=True)
class AuditWindow:
    """The ledger window a run judges: events in [since, until). ``since`` None means all history.

    Events before ``since`` (within the look-back the I/O module read) are context only: the
    previous checkpoint, the previous commit, the previous run.
    """

    until: datetime
    since: datetime | None = None


@dataclass(frozen=True)
class MatchRules:
    """How group commits are tied to checkpoints, and when a silent run counts as dead."""

    commit_match_window_s: float = 300.0
    clock_skew_s: float = 5.0
    run_silence_s: float = 3600.0


@dataclass(frozen=True)
class PartitionRange:
    """What one partition of one job must hold in the sink: [lo, hi); lo None = unknown."""

    job_name: str
    group_id: str | None
    topic: str
    partition: int
    lo: int | None
    hi: int
    lo_source: str
    hi_checkpoint_id: int | None = None
    hi_run_id: str | None = None
    beyond_from: int | None = None
    last_checkpoint_id: int | None = None
    last_checkpoint_offset: int | None = None
    last_completed_at: datetime | None = None


# --- small helpers -------------------------------------------------------------------------------


def finalize_findings(
    core: Iterable[Finding], reconcile_run_id: str, detected_at: datetime
) -> list[StoredFinding]:
    """Findings as the run stores them, one per finding id (``one_per_finding_id``)."""
    return one_per_finding_id(StoredFinding.of(f, reconcile_run_id, detected_at) for f in core)


def finding_order(finding: StoredFinding) -> tuple[int, int]:
    """Sort key of a finalized finding: most severe first, then the one counting the most records."""
    return SEVERITIES.index(finding.severity), -(finding.record_count or 0)


def one_per_finding_id(findings: Iterable[StoredFinding]) -> list[StoredFinding]:
    """Finalized findings, one per finding id: the first by ``finding_order`` (the most severe, then
    the one counting the most records). Two share an id only when input findings were duplicated.
    Order is kept."""
    best: dict[str, StoredFinding] = {}
    for finding in findings:
        kept = best.get(finding.finding_id)
        if kept is None or finding_order(finding) < finding_order(kept):
            best[finding.finding_id] = finding
    return list(best.values())


def gap_finding(
    rng: PartitionRange,
    start: int,
    end: int,
    verdict: Mapping[str, Any] | None,
) -> Finding:
    """One GAP. ``verdict`` is the source-topic confirmation or None (not run)."""
    evidence: dict[str, Any]
    if verdict is None:
        status, evidence = OPEN, {"confirmation": "not run"}
    else:
        status, evidence = str(verdict["status"]), dict(verdict)
    severity = {CONFIRMED: CRITICAL, OPEN: CRITICAL, UNVERIFIABLE: ERROR, BENIGN: INFO}[status]
    evidence.update(
        {
            "missing_offsets": end - start,
            "range_source": rng.lo_source,
            "covered_by_checkpoint": rng.hi_checkpoint_id,
            "covered_by_run": rng.hi_run_id,
            "checkpoint_offset": rng.hi,
            # When the sink should have held these records at the latest: the gap's evidence time,
            # which dates its incident (incidents --since, the dashboard's impact over time).
            "checkpoint_completed_at": rng.last_completed_at,
        }
    )
    evidence["status"] = status
    return Finding.of(
        GAP,
        severity,
        status,
        _range_where(rng, rng.hi_checkpoint_id),
        evidence,
        offset_start=start,
        offset_end=end,
        record_count=end - start,
    )


def gap_findings(
    gaps: Sequence[tuple[PartitionRange, int, int, Mapping[str, Any] | None]],
) -> list[Finding]:
    """GAP findings: one per gap, except the benign ones (transaction markers,
    aborted or compacted records), which are one finding per partition and window with their
    count, so a transactional source does not yield one row per marker."""
    out: list[Finding] = []
    benign: dict[tuple[str, str, int], list[tuple[PartitionRange, int, int, Mapping[str, Any]]]] = (
        defaultdict(list)
    )
    for rng, start, end, verdict in gaps:
        if verdict is not None and verdict.get("status") == BENIGN:
            benign[(rng.job_name, rng.topic, rng.partition)].append((rng, start, end, verdict))
        else:
            out.append(gap_finding(rng, start, end, verdict))
    for key in sorted(benign):
        out.append(benign_gaps_finding(benign[key]))
    return out


# Benign gaps listed one by one in the evidence, at most.
BENIGN_RANGES_SHOWN: Final = 20


def benign_gaps_finding(gaps: Sequence[tuple[PartitionRange, int, int, Mapping[str, Any]]]) -> Finding:
    """One partition's benign gaps as one GAP (info): the span they lie in, the offsets missing in
    all, counts by cause, the first ranges. Its identity is that of a gap over the span, so a
    lone benign gap keeps the id it has when a later run cannot confirm it."""
    ordered = sorted(gaps, key=lambda g: g[1])
    rng = ordered[-1][0]
    by_cause: dict[str, int] = defaultdict(int)
    for _, start, end, verdict in ordered:
        by_cause[str(verdict.get("cause") or "no_committed_data_records")] += end - start
    missing = sum(end - start for _, start, end, _ in ordered)
    return Finding.of(
        GAP,
        INFO,
        BENIGN,
        _range_where(rng, rng.hi_checkpoint_id),
        offset_start=ordered[0][1],
        offset_end=max(end for _, _, end, _ in ordered),
        record_count=missing,
        evidence={
            "status": BENIGN,
            "gaps": len(ordered),
            "missing_offsets": missing,
            "by_cause": dict(sorted(by_cause.items())),
            "ranges": [[start, end] for _, start, end, _ in ordered[:BENIGN_RANGES_SHOWN]],
            "ranges_truncated": len(ordered) > BENIGN_RANGES_SHOWN,
            "explanation": "no committed data records: transaction markers, aborted or compacted",
            "range_source": rng.lo_source,
            "covered_by_checkpoint": rng.hi_checkpoint_id,
            "covered_by_run": rng.hi_run_id,
            "checkpoint_offset": rng.hi,
            "checkpoint_completed_at": rng.last_completed_at,
        },
    )


def duplicate_finding(rng: PartitionRange, run: Mapping[str, Any]) -> Finding:
    writers = json.loads(str(run["writers"]))
    return Finding.of(
        DUPLICATE,
        ERROR,
        OPEN,
        _range_where(rng),
        offset_start=int(run["offset_start"]),
        offset_end=int(run["offset_end"]),
        record_count=int(run["extra_copies"]),
        evidence={
            "duplicated_offsets": int(run["offsets"]),
            "extra_copies": int(run["extra_copies"]),
            "max_copies": int(run["max_copies"]),
            "writers": writers,
        },
    )


@dataclass(frozen=True)
class CopyDates:
    """What the ledger says of one DUPLICATE's copies: when each copy it can date was written (the
    completion of the writer's checkpoint: a batch's output is durable once its checkpoint
    completed), the job's runs among the writers, and when the job's first checkpoint covering
    the duplicated offsets completed (the date of the job's own copy when the sink names no writer
    the ledger knows)."""

    written_at: tuple[datetime, ...] = ()
    job_runs: tuple[str, ...] = ()
    processed_at: datetime | None = None


def dated_duplicate(finding: Finding, dates: CopyDates) -> Finding:
    """A DUPLICATE with its evidence time and the job's writer runs.

    ``first_copy_written_at`` / ``last_copy_written_at``: the copies the ledger can date. A copy
    by a writer outside the job (no run of the job in the ledger, or no run id at all) has no date
    there; such writers are listed in ``outside_writers`` ("" for copies without a run id). When
    no copy can be dated, ``processed_at``: the completion of the job's checkpoint that first
    covered these offsets. ``job_runs`` are real run ids of the job only; a second writer's label
    is never one.
    """
    writers = [w for w in finding.evidence.get("writers", []) if isinstance(w, Mapping)]
    runs = set(dates.job_runs)
    evidence: dict[str, Any] = {
        **finding.evidence,
        "job_runs": sorted(runs),
        "outside_writers": sorted(
            {str(w["run"]) if w.get("run") is not None else "" for w in writers if w.get("run") not in runs}
        ),
    }
    if dates.written_at:
        evidence["first_copy_written_at"] = min(dates.written_at)
        evidence["last_copy_written_at"] = max(dates.written_at)
    else:
        evidence["processed_at"] = dates.processed_at
    return dataclasses.replace(finding, evidence={k: instant(v) for k, v in evidence.items()})


def beyond_finding(rng: PartitionRange, stats: Mapping[str, Any]) -> Finding:
    start = int(rng.beyond_from if rng.beyond_from is not None else rng.hi)
    return Finding.of(
        SINK_BEYOND_CHECKPOINT,
        WARN,
        OPEN,
        _range_where(rng),
        offset_start=start,
        offset_end=int(stats["max_offset"]) + 1,
        record_count=int(stats["rows"]),
        evidence={
            "latest_completed_offset": start,
            "sink_rows": int(stats["rows"]),
            "sink_max_offset": int(stats["max_offset"]),
            "writer_runs": list(stats.get("runs") or []),
            "writer_checkpoints": list(stats.get("checkpoints") or []),
        },
    )


def _range_where(rng: PartitionRange, checkpoint_id: int | None = None) -> dict[str, Any]:
    """The coordinates of a sink-derived finding: the range's job and partition, and optionally
    the checkpoint that covers it."""
    return {
        "job_name": rng.job_name,
        "group_id": rng.group_id,
        "topic": rng.topic,
        "partition": rng.partition,
        "checkpoint_id": checkpoint_id,
    }
