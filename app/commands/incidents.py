"""`offset-audit incidents`: the incidents the reconciliations found, most severe first."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.cli import EXIT_FINDINGS, EXIT_OK, add_fail_on, emit
from app.commands.reconcile import incident_summary, parse_time
from app.config import AppConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", dest="jobs", action="append", default=[], metavar="JOB",
                        help="only this job's incidents (repeatable)")  # fmt: skip
    parser.add_argument("--since", type=parse_time, default=None,
                        help="only incidents with evidence at or after this time")  # fmt: skip
    add_fail_on(parser, "an open incident at or above this severity is listed")


def impact_text(row: Mapping[str, Any]) -> str:
    parts = [
        f"{row[k]} {label}"
        for k, label in (
            ("records_lost", "lost"),
            ("records_unverifiable", "unverifiable"),
            ("records_duplicated", "duplicated"),
            ("records_replayed", "replayed"),
        )
        if row.get(k)
    ]
    if row.get("max_commit_lag"):
        parts.append(f"commit lag {row['max_commit_lag']} offsets")
    return ", ".join(parts) or "no records lost or duplicated"


def incidents_text(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "no incidents"
    lines = []
    for r in rows:
        lines.append(
            f"{r['severity']:<8} {r['kind']:<22} {r['incident_id']}  {r['job_name']} "
            f"({r['partitions']} partition(s), {r['status']})"
        )
        lines.append(f"         {r['cause']}")
        lines.append(f"         impact: {impact_text(r)}")
        plan = json.loads(r["remedy"] or "{}")
        if plan.get("steps"):
            lines.append(f"         repair: {plan.get('command')}")
    return "\n".join(lines)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.reconcile.findings import severity_at_least
    from app.reconcile.outputs import read_incidents
    from app.runtime.session import table_storage

    rows = read_incidents(table_storage(cfg), cfg, jobs=args.jobs, since=args.since)
    failing = sum(1 for r in rows if r["status"] == "open" and severity_at_least(r["severity"], args.fail_on))
    summary = {"incidents": [incident_summary(r) for r in rows], "failing": failing, "fail_on": args.fail_on}
    emit(args, summary, incidents_text(rows))
    return EXIT_FINDINGS if failing else EXIT_OK
