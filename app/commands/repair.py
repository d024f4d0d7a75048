"""`offset-audit repair --incident ID [--execute]`: the remedy plan of one incident.

Without --execute it is a dry run: the plan reconcile stored with the incident is printed (replay
ranges as Spark Kafka-source options and a reset-offsets CSV, duplicate copies to delete, group
offsets to set) and nothing changes; it reads the incidents table on the driver and starts no Spark.
With --execute the plan is carried out (app.incidents.repair), the incident is marked resolved, and
the undo (the sink's table version before the change) is printed. Executing a repaired incident
again changes nothing and writes nothing, not even the incidents table.
"""

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
    parser.add_argument(
        "--execute",
        action="store_true",
        help="carry the plan out (default: print it only); running it again changes nothing",
    )


def plan_text(row: Mapping[str, Any], plan: Mapping[str, Any]) -> str:
    lines = [
        f"incident {row['incident_id']} ({row['kind']}, {row['severity']}, {row['status']}): "
        f"{row['job_name']}",
        f"  {row['cause']}",
        "  dry run: nothing is changed (--execute carries it out)",
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
    from app.reconcile.outputs import mark_resolved, read_incidents
    from app.runtime.session import spark_session, table_storage
    from app.storage.tables import tables_from_config

    rows = [r for r in read_incidents(table_storage(cfg), cfg) if r["incident_id"] == args.incident]
    if not rows:
        raise UsageError(f"no incident {args.incident!r}; `offset-audit incidents` lists them")
    row = rows[0]
    plan = json.loads(row["remedy"] or "{}")
    if not args.execute:
        emit(args, {"incident_id": row["incident_id"], "dry_run": True, "plan": plan}, plan_text(row, plan))
        return EXIT_OK
    from app.incidents import repair
    from app.runtime.session import kafka_bootstrap

    spark = spark_session(cfg)
    sink = tables_from_config(cfg).sink_for(str(row["job_name"]))
    outcome = repair.execute(spark, cfg, row, sink, lambda: kafka_bootstrap(cfg))
    done = {"actions": outcome.actions, "undo": outcome.undo}
    updated = mark_resolved(spark, cfg, row, done, outcome.changed)
    if updated:
        lines = [f"incident {row['incident_id']} repaired ({row['kind']}); marked resolved"]
    else:
        lines = [f"incident {row['incident_id']} was repaired before ({row['kind']}); nothing changed"]
    lines += [f"  {json.dumps(a, sort_keys=True, default=str)}" for a in outcome.actions]
    lines += [f"  undo: {u}" for u in outcome.undo] or ["  nothing changed in the sink"]
    summary = {"incident_id": row["incident_id"], "dry_run": False, "incident_updated": updated, **done}
    emit(args, summary, "\n".join(lines))
    return EXIT_OK
