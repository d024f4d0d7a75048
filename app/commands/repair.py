"""`offset-audit repair --incident ID`: the remedy plan of one incident (a dry run: nothing is
changed). The plan is what reconcile stored with the incident: replay ranges as Spark Kafka-source
options and a reset-offsets CSV, duplicate copies to delete, group offsets to set."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from app.cli import EXIT_OK, emit
from app.config import AppConfig
from app.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--incident", required=True, help="the incident id (see `offset-audit incidents`)")


def plan_text(row: Mapping[str, Any], plan: Mapping[str, Any]) -> str:
    lines = [
        f"incident {row['incident_id']} ({row['kind']}, {row['severity']}, {row['status']}): "
        f"{row['job_name']}",
        f"  {row['cause']}",
        "  dry run: nothing is changed",
    ]
    if not plan.get("steps"):
        lines.append(f"  {plan.get('note', 'nothing to repair')}")
    for number, step in enumerate(plan.get("steps", []), 1):
        lines.append(f"  step {number}: {step['action']}")
        for r in step.get("ranges", []):
            lines.append(f"    {r['topic']}/{r['partition']} [{r['start']}, {r['end']})")
        for o in step.get("offsets", []):
            lines.append(f"    {o['topic']}/{o['partition']} -> {o['offset']}")
        for options in step.get("spark_options", []):
            lines.append(
                f"    spark: startingOffsets={options['startingOffsets']} "
                f"endingOffsets={options['endingOffsets']}"
            )
        if step.get("reset_offsets_csv"):
            lines.append("    kafka-consumer-groups --reset-offsets --from-file <this CSV>:")
            lines += [f"      {line}" for line in str(step["reset_offsets_csv"]).splitlines()]
        if step.get("keep"):
            lines.append(f"    keep: {step['keep']}")
    return "\n".join(lines)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app import reconcile_io
    from app.runtime import spark_session

    rows = [
        r for r in reconcile_io.read_incidents(spark_session(cfg), cfg) if r["incident_id"] == args.incident
    ]
    if not rows:
        raise UsageError(f"no incident {args.incident!r}; `offset-audit incidents` lists them")
    row = rows[0]
    plan = json.loads(row["remedy"] or "{}")
    emit(args, {"incident_id": row["incident_id"], "dry_run": True, "plan": plan}, plan_text(row, plan))
    return EXIT_OK
