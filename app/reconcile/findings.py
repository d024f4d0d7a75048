"""Reconciliation of the three accounts (ledger, group commits, sink): pure transforms.

Sink-derived findings (GAP, DUPLICATE, SINK_BEYOND_CHECKPOINT) start from small per-bucket
aggregates that the I/O module collects, so their range arithmetic is plain Python and testable
without a JVM. Everything read from the ledger and the group's commits (ledger- and
commit-derived findings, completed checkpoints, the ranges the sink must hold, restarts) lives in
app/reconcile/ledger_audit.py: those inputs are small, so they are analysed on the driver.

Every finding function returns the *core* columns (``FINDING_CORE``): the contract's columns minus
the run id and detection time, plus ``identity``, a string that together with the coordinates makes
the finding unique. ``finalize_findings`` turns those rows into the ``findings`` contract with
``finding_id = sha2(identity columns)`` -- never over run ids of the reconciliation or times of
detection, so a re-run over the same inputs yields the same ids.

Internal frames use canonical names: the sink is renamed by the I/O module to ``topic, partition,
offset, writer_checkpoint_id, writer_run_id``.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
)

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
from app.reconcile.sink_offsets import PartitionRange

# The findings contract minus what finalize_findings adds (id, run, time), plus the identity the id
# is hashed from: derived, so the contract stays in app/contracts/tables.py alone.
FINDING_CORE_SCHEMA: Final = StructType(
    [f for f in FINDINGS_SCHEMA.fields if f.name not in ("finding_id", "reconcile_run_id", "detected_at")]
    + [StructField("identity", StringType(), True)]
)
FINDING_CORE: Final = tuple(FINDING_CORE_SCHEMA.fieldNames())
# What makes a finding itself; evidence, counts, severity and status may change between runs.
IDENTITY_COLUMNS: Final = (
    "finding_type",
    "job_name",
    "group_id",
    "topic",
    "partition",
    "checkpoint_id",
    "run_id",
    "offset_start",
    "identity",
)


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


# --- small helpers -------------------------------------------------------------------------------


# The id is sha2-256 over the identity columns as strings, a null spelled out so (null, 'a') and
# ('a', null) differ; the same bytes earlier versions hashed in Spark, so stored ids stay valid.
_NULL: Final = "\u2400"
_SEP: Final = "\u241f"


def finding_id(row: Mapping[str, Any]) -> str:
    parts = [_NULL if row[c] is None else str(row[c]) for c in IDENTITY_COLUMNS]
    return hashlib.sha256(_SEP.join(parts).encode("utf-8")).hexdigest()


def finalize_findings(
    core: Iterable[Mapping[str, Any]], reconcile_run_id: str, detected_at: datetime
) -> list[dict[str, Any]]:
    """FINDING_CORE rows -> findings contract rows, one per finding id (``one_per_finding_id``)."""
    rows = [
        {
            **{f.name: r.get(f.name) for f in FINDINGS_SCHEMA.fields},
            "finding_id": finding_id(r),
            "reconcile_run_id": reconcile_run_id,
            "detected_at": detected_at,
        }
        for r in core
    ]
    return one_per_finding_id(rows)


def finding_order(row: Mapping[str, Any]) -> tuple[int, int]:
    """Sort key of a finalized finding: most severe first, then the one counting the most records."""
    return SEVERITIES.index(row["severity"]), -(row["record_count"] or 0)


def one_per_finding_id(rows: Iterable[Any]) -> list[Any]:
    """Finalized rows, one per finding id: the first by ``finding_order`` (the most severe, then the
    one counting the most records). Two rows share an id only when input rows were duplicated.
    Order is kept."""
    best: dict[str, Any] = {}
    for row in rows:
        kept = best.get(row["finding_id"])
        if kept is None or finding_order(row) < finding_order(kept):
            best[row["finding_id"]] = row
    return list(best.values())


def gap_finding(
    rng: PartitionRange,
    start: int,
    end: int,
    verdict: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One GAP in FINDING_CORE form. ``verdict`` is the source-topic confirmation or None (not run)."""
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
        }
    )
    evidence["status"] = status
    return _core_row(
        GAP,
        severity,
        status,
        rng,
        offset_start=start,
        offset_end=end,
        record_count=end - start,
        evidence=evidence,
        checkpoint_id=rng.hi_checkpoint_id,
    )


def gap_findings(
    gaps: Sequence[tuple[PartitionRange, int, int, Mapping[str, Any] | None]],
) -> list[dict[str, Any]]:
    """GAP rows in FINDING_CORE form: one per gap, except the benign ones (transaction markers,
    aborted or compacted records), which are one finding per partition and window with their
    count, so a transactional source does not yield one row per marker."""
    out: list[dict[str, Any]] = []
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


def benign_gaps_finding(gaps: Sequence[tuple[PartitionRange, int, int, Mapping[str, Any]]]) -> dict[str, Any]:
    """One partition's benign gaps as one GAP (info): the span they lie in, the offsets missing in
    all, counts by cause, the first ranges. Its identity is that of a gap over the span, so a
    lone benign gap keeps the id it has when a later run cannot confirm it."""
    ordered = sorted(gaps, key=lambda g: g[1])
    rng = ordered[-1][0]
    by_cause: dict[str, int] = defaultdict(int)
    for _, start, end, verdict in ordered:
        by_cause[str(verdict.get("cause") or "no_committed_data_records")] += end - start
    missing = sum(end - start for _, start, end, _ in ordered)
    return _core_row(
        GAP,
        INFO,
        BENIGN,
        rng,
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
        },
        checkpoint_id=rng.hi_checkpoint_id,
    )


def duplicate_finding(rng: PartitionRange, run: Mapping[str, Any]) -> dict[str, Any]:
    writers = json.loads(str(run["writers"]))
    return _core_row(
        DUPLICATE,
        ERROR,
        OPEN,
        rng,
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


def beyond_finding(rng: PartitionRange, stats: Mapping[str, Any]) -> dict[str, Any]:
    start = int(rng.beyond_from if rng.beyond_from is not None else rng.hi)
    return _core_row(
        SINK_BEYOND_CHECKPOINT,
        WARN,
        OPEN,
        rng,
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


def _core_row(
    finding_type: str,
    severity: str,
    status: str,
    rng: PartitionRange,
    *,
    offset_start: int,
    offset_end: int | None,
    record_count: int,
    evidence: Mapping[str, Any],
    checkpoint_id: int | None = None,
    run_id: str | None = None,
    identity: str = "",
) -> dict[str, Any]:
    return {
        "finding_type": finding_type,
        "severity": severity,
        "status": status,
        "job_name": rng.job_name,
        "group_id": rng.group_id,
        "topic": rng.topic,
        "partition": rng.partition,
        "checkpoint_id": checkpoint_id,
        "run_id": run_id,
        "offset_start": offset_start,
        "offset_end": offset_end,
        "record_count": record_count,
        "evidence": json.dumps(evidence, sort_keys=True, default=str),
        "identity": identity,
    }


def severity_at_least(severity: str, threshold: str) -> bool:
    """True when ``severity`` is as severe as ``threshold`` or more (SEVERITIES is most severe first)."""
    return SEVERITIES.index(severity) <= SEVERITIES.index(threshold)
