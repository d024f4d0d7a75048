"""`offset-audit incidents`: the incidents the reconciliations found, most severe first."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from app.commands.options import add_fail_on, parse_time
from app.commands.outcome import EXIT_FINDINGS, EXIT_OK, emit
from app.config import AppConfig
from app.contracts.vocabulary import severity_at_least
from app.incidents.incident import Impact, StoredIncident, summaries_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", dest="jobs", action="append", default=[], metavar="JOB",
                        help="only this job's incidents (repeatable)")  # fmt: skip
    parser.add_argument("--since", type=parse_time, default=None,
                        help="only incidents with evidence at or after this time")  # fmt: skip
    add_fail_on(parser, "an open incident at or above this severity is listed")


def impact_text(impact: Impact) -> str:
    parts = [
        f"{n} {label}"
        for n, label in (
            (impact.records_lost, "lost"),
            (impact.records_unverifiable, "unverifiable"),
            (impact.records_duplicated, "duplicated"),
            (impact.records_replayed, "replayed"),
        )
        if n
    ]
    if impact.max_commit_lag:
        parts.append(f"commit lag {impact.max_commit_lag} offsets")
    return ", ".join(parts) or "no records lost or duplicated"


def incidents_text(incidents: Sequence[StoredIncident]) -> str:
    if not incidents:
        return "no incidents"
    lines = []
    for i in incidents:
        lines.append(
            f"{i.severity:<8} {i.kind:<22} {i.incident_id}  {i.job_name} "
            f"({i.partitions} partition(s), {i.status})"
        )
        lines.append(f"         {i.cause}")
        lines.append(f"         impact: {impact_text(i.impact)}")
        if i.remedy.steps:
            lines.append(f"         repair: {i.remedy.command}")
    return "\n".join(lines)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.incidents.io import read_incidents
    from app.runtime.session import table_storage
    from app.storage.handles import AuditTables

    tables = AuditTables.from_config(cfg, table_storage(cfg))
    incidents = read_incidents(tables.incidents, jobs=args.jobs, since=args.since)
    failing = sum(1 for i in incidents if i.is_open and severity_at_least(i.severity, args.fail_on))
    summary = {"incidents": summaries_json(incidents), "failing": failing, "fail_on": args.fail_on}
    emit(args, summary, incidents_text(incidents))
    return EXIT_FINDINGS if failing else EXIT_OK
