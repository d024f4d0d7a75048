"""Restart forensics: where each run resumed compared to where the previous one got, and the
incident timeline around a moment. Pure transforms and formatting; reading and writing live in
app/reconcile/forensics/run.py.

A restart is judged per partition against the last checkpoint completed before the run started
(normally the previous run's last one): resumed at it -> exact, below it -> replay (the records in
between are read twice; the sink shows them as duplicates unless the sink is idempotent), above it
-> skip (the records in between were never read: a gap). The group's committed offset at that
moment is kept beside it because a restart without state resumes from there. The
classification itself is computed from the ledger in app/reconcile/ledger/audit.py; this module links it to
the sink and formats it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from app.contracts.findings import SKIPPED_RECORDS_KEY, StoredFinding
from app.contracts.tables import RESTARTS_SCHEMA
from app.contracts.vocabulary import (
    BENIGN,
    CONFIRMED,
    CRITICAL,
    ERROR,
    OPEN,
    RESTART_REPLAY,
    RESTART_REPLAYED,
    RESTART_SKIP,
    RESTART_SKIPPED,
    UNVERIFIABLE,
    WARN,
)
from app.incidents.incident import StoredIncident
from app.reconcile.findings import Finding
from app.reconcile.ledger.audit import RESTART_COLUMNS

# What the sink shows in a restart's range, per (job_name, run_id, topic, partition).
Observed = Mapping[tuple[str, str, str, int], Mapping[str, Any]]


def restart_key(row: Mapping[str, Any]) -> tuple[str, str, str, int]:
    """A restart's (job, run, topic, partition): the key of what is known of it per partition."""
    return (row["job_name"], row["run_id"], row["topic"], row["partition"])


def restart_range(row: Mapping[str, Any]) -> tuple[int, int]:
    """[start, end) of the offsets a replay or skip affects."""
    return (
        min(row["resumed_offset"], row["previous_checkpoint_offset"]),
        max(row["resumed_offset"], row["previous_checkpoint_offset"]),
    )


def restart_ranges(restarts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The offset range each replay or skip affects: [range_start, range_end) per job, run and
    partition."""
    return [
        {
            "job_name": r["job_name"],
            "run_id": r["run_id"],
            "topic": r["topic"],
            "partition": r["partition"],
            "range_start": min(r["resumed_offset"], r["previous_checkpoint_offset"]),
            "range_end": max(r["resumed_offset"], r["previous_checkpoint_offset"]),
        }
        for r in restarts
        if r["classification"] in (RESTART_REPLAYED, RESTART_SKIPPED)
    ]


def restarts_table(
    restarts: Iterable[Mapping[str, Any]], observed: Observed, forensics_run_id: str
) -> list[dict[str, Any]]:
    """Rows of the restarts contract: each restart with the duplicates the sink shows in its range."""
    out = []
    for r in restarts:
        row = {f.name: r.get(f.name) for f in RESTARTS_SCHEMA.fields}
        row["duplicates_observed"] = observed.get(restart_key(r), {}).get("duplicates_observed")
        row["forensics_run_id"] = forensics_run_id
        out.append(row)
    return out


def restart_severity(classification: str) -> str | None:
    """The severity of a restart's finding (CONTRACTS.md section 5): a replay reads records twice (warn),
    a skip never reads them (critical); an exact or unknown restart has no finding."""
    return {RESTART_REPLAYED: WARN, RESTART_SKIPPED: CRITICAL}.get(classification)


def find_restart_anomalies(
    restarts: Iterable[Mapping[str, Any]],
    observed: Observed,
    read_back: Mapping[tuple[str, str, str, int], Mapping[str, Any] | None] | None = None,
) -> list[Finding]:
    """RESTART_REPLAY (warn) and RESTART_SKIP (critical) findings.

    ``observed`` adds, per restart and partition, what the sink shows in the affected range:
    duplicates_observed and present_offsets. ``read_back``: the skipped ranges of the jobs whose
    sink cannot show missing records (`delta_batches`, `none`), as the GAP confirmation read them
    back from the source (None: not read back), per the same key; a skip of a `coordinates` sink
    is not in it, its GAPs tell what the sink lacks.
    """
    out = []
    for r in restarts:
        severity = restart_severity(r["classification"])
        if severity is None:
            continue
        replay = r["classification"] == RESTART_REPLAYED
        start, end = restart_range(r)
        seen = observed.get(restart_key(r), {})
        evidence = {
            **{c: r[c] for c in _EVIDENCE},
            "duplicates_observed_in_sink": seen.get("duplicates_observed"),
            "offsets_present_in_sink": seen.get("present_offsets"),
        }
        status = OPEN
        if not replay and read_back is not None and restart_key(r) in read_back:
            status, judged = skip_judged(read_back[restart_key(r)])
            evidence.update(judged)
            severity = _SKIP_SEVERITY[status]
        out.append(
            Finding.of(
                RESTART_REPLAY if replay else RESTART_SKIP,
                severity,
                status,
                r,
                evidence,
                cols=("job_name", "group_id", "topic", "partition", "run_id"),
                offset_start=start,
                offset_end=end,
                record_count=end - start,
            )
        )
    return out


# A skip read back from the source: data records never read are lost (critical), offsets retention
# deleted cannot be told (error), markers, aborted and compacted records cost nothing (warn: the run
# still started past where it should have).
_SKIP_SEVERITY: Final = {CONFIRMED: CRITICAL, OPEN: CRITICAL, UNVERIFIABLE: ERROR, BENIGN: WARN}


def skip_judged(verdict: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """A RESTART_SKIP's status and the evidence of its range read back (``app.kafka.gaps.verdict``;
    None: confirmation not run, the whole range unverifiable): ``skipped_records`` holds the data
    records lost and the offsets unverifiable, what the restart's incident counts."""
    if verdict is None:
        return OPEN, {"confirmation": "not run", SKIPPED_RECORDS_KEY: None}
    found = int(verdict["data_records"])
    gone = int(verdict["offsets_below_log_start"]) + int(verdict["offsets_beyond_high_watermark"])
    return str(verdict["status"]), {
        **{k: v for k, v in verdict.items() if k != "status"},
        SKIPPED_RECORDS_KEY: {"lost": found, "unverifiable": gone},
    }


# A restart finding's evidence: its restart row minus the finding's own columns.
_EVIDENCE: Final = tuple(
    c
    for c in RESTART_COLUMNS
    if c not in ("job_name", "run_id", "group_id", "topic", "partition", "classification")
    and not c.startswith("records_")
)


# --- the incident timeline -----------------------------------------------------------------------


def _fmt_time(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    return "?" if value is None else str(value)


def _tp_list(parts: Iterable[tuple[str, int, Any]]) -> str:
    return " ".join(
        f"{t}/{p}={'-' if o is None else o}" for t, p, o in sorted(parts, key=lambda x: (x[0], x[1]))
    )


def timeline_entries(
    ledger_rows: Sequence[Mapping[str, Any]],
    commit_rows: Sequence[Mapping[str, Any]],
    restart_rows: Sequence[Mapping[str, Any]],
    findings: Sequence[StoredFinding],
    incidents: Sequence[StoredIncident] = (),
) -> list[dict[str, Any]]:
    """Merge the sources into time-ordered entries; one entry per event and checkpoint, with
    the per-partition offsets folded into it (what a person reads first in an incident). Findings
    and incidents follow, untimed."""
    entries: dict[tuple[Any, ...], dict[str, Any]] = {}
    key: tuple[Any, ...]
    for r in ledger_rows:
        detail = r.get("detail") or "{}"
        key = ("ledger", r["event_time"], r["event_type"], r["run_id"], r.get("checkpoint_id"), detail)
        e = entries.setdefault(
            key,
            {
                "time": r["event_time"],
                "source": "ledger",
                "what": r["event_type"],
                "run_id": r["run_id"],
                "checkpoint_id": r.get("checkpoint_id"),
                "detail": json.loads(detail) if detail else {},
                "offsets": [],
            },
        )
        if r.get("topic") is not None:
            e["offsets"].append((r["topic"], r["partition"], r.get("offset")))
    for c in commit_rows:
        t = c.get("commit_time") or c.get("log_time")
        key = ("commit", t, c["group_id"], c["record_kind"])
        e = entries.setdefault(
            key,
            {
                "time": t,
                "source": "group",
                "what": f"GROUP_{str(c['record_kind']).upper()}",
                "group_id": c["group_id"],
                "offsets": [],
                "detail": {},
            },
        )
        e["offsets"].append((c["topic"], c["partition"], c.get("committed_offset")))
    for r in restart_rows:
        key = ("restart", r["started_at"], r["run_id"], r["classification"])
        e = entries.setdefault(
            key,
            {
                "time": r["started_at"],
                "source": "forensics",
                "what": f"RESTART_{str(r['classification']).upper()}",
                "run_id": r["run_id"],
                "offsets": [],
                "detail": {"previous_run_id": r.get("previous_run_id")},
            },
        )
        e["offsets"].append((r["topic"], r["partition"], r.get("resumed_offset")))
    out = sorted(entries.values(), key=lambda e: (_fmt_time(e["time"]), e["source"], e["what"]))
    for f in findings:
        out.append(
            {
                "time": None,
                "source": "finding",
                "what": f.finding_type,
                "severity": f.severity,
                "status": f.status,
                "run_id": f.run_id,
                "checkpoint_id": f.checkpoint_id,
                "offsets": [(f.topic, f.partition, f.offset_start)] if f.topic is not None else [],
                "detail": {
                    "offset_end": f.offset_end,
                    "record_count": f.record_count,
                    "finding_id": f.finding_id,
                },
            }
        )
    for i in incidents:
        out.append(
            {
                "time": i.last_evidence_at,
                "source": "incident",
                "what": i.kind,
                "severity": i.severity,
                "status": i.status,
                "run_id": ",".join(i.run_ids),
                "offsets": [],
                "detail": {
                    "incident_id": i.incident_id,
                    "cause": i.cause,
                    "records_lost": i.impact.records_lost,
                    "records_duplicated": i.impact.records_duplicated,
                    "repair": f"offset-audit repair --incident {i.incident_id}",
                },
            }
        )
    return out


def format_timeline(job: str, at: datetime, entries: Sequence[Mapping[str, Any]]) -> str:
    """The entries as text lines: time, source, what, run/checkpoint, offsets, key details."""
    lines = [f"Incident timeline for job {job} around {_fmt_time(at)}", ""]
    marked = False
    for e in entries:
        if e["source"] in ("finding", "incident"):
            continue
        if not marked and e["time"] is not None and _fmt_time(e["time"]) >= _fmt_time(at):
            lines.append(f"{'-' * 24} {_fmt_time(at)} (--at) {'-' * 24}")
            marked = True
        who = (e.get("group_id") and f"group={e['group_id']}") or f"run={e.get('run_id')}"
        cp = f" cp={e['checkpoint_id']}" if e.get("checkpoint_id") is not None else ""
        detail = {k: v for k, v in (e.get("detail") or {}).items() if v not in (None, "", [], {})}
        extra = f"  {json.dumps(detail, sort_keys=True, default=str)}" if detail else ""
        lines.append(
            f"{_fmt_time(e['time'])}  {e['what']:<22} {who}{cp}  {_tp_list(e['offsets'])}{extra}".rstrip()
        )
    if not marked:
        lines.append(f"{'-' * 24} {_fmt_time(at)} (--at) {'-' * 24}")
    findings = [e for e in entries if e["source"] == "finding"]
    lines.append("")
    lines.append(f"Findings touching these runs: {len(findings)}")
    for f in findings:
        off = f["offsets"][0] if f["offsets"] else (None, None, None)
        d = f["detail"]
        where = f"{off[0]}/{off[1]} [{off[2]}, {d.get('offset_end')})" if off[0] is not None else "-"
        lines.append(
            f"  {f['severity']:<8} {f['what']:<22} {f['status']:<12} run={f.get('run_id')} "
            f"cp={f.get('checkpoint_id')} {where} records={d.get('record_count')}"
        )
    incidents = [e for e in entries if e["source"] == "incident"]
    lines.append("")
    lines.append(f"Incidents around this time: {len(incidents)}")
    for i in incidents:
        d = i["detail"]
        lines.append(
            f"  {i['severity']:<8} {i['what']:<22} {i['status']:<8} {d['incident_id']}  {d.get('cause')}"
        )
        lines.append(f"           {d['repair']}")
    return "\n".join(lines)
