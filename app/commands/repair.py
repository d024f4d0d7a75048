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

from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig
from app.errors import UsageError
from app.incidents.incident import StoredIncident
from app.incidents.remedy import DeleteDuplicatesStep, ReplayStep, ResetOffsetsStep


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--incident", required=True, help="the incident id (see `offset-audit incidents`)")
    parser.add_argument(
        "--execute",
        action="store_true",
        help="carry the plan out (default: print it only); running it again changes nothing",
    )


def plan_text(incident: StoredIncident) -> str:
    plan = incident.remedy
    lines = [
        f"incident {incident.incident_id} ({incident.kind}, {incident.severity}, {incident.status}): "
        f"{incident.job_name}",
        f"  {incident.cause}",
        "  dry run: nothing is changed (--execute carries it out)",
    ]
    if not plan.steps:
        lines.append(f"  {plan.note or 'nothing to repair'}")
    for number, step in enumerate(plan.steps, 1):
        lines.append(f"  step {number}: {step.action}")
        if isinstance(step, ResetOffsetsStep):
            lines += [f"    {o.topic}/{o.partition} -> {o.offset}" for o in step.offsets]
        else:
            lines += [f"    {r.topic}/{r.partition} [{r.start}, {r.end})" for r in step.ranges]
        if isinstance(step, ReplayStep):
            lines += [
                f"    spark: startingOffsets={o['startingOffsets']} endingOffsets={o['endingOffsets']}"
                for o in step.spark_options()
            ]
        csv = "" if isinstance(step, DeleteDuplicatesStep) else step.reset_offsets_csv()
        if csv:
            lines.append("    kafka-consumer-groups --reset-offsets --from-file <this CSV>:")
            lines += [f"      {line}" for line in csv.splitlines()]
        if isinstance(step, DeleteDuplicatesStep):
            lines.append(f"    keep: {step.keep}")
    return "\n".join(lines)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.incidents.io import mark_resolved, read_incidents
    from app.runtime.session import spark_session, table_storage
    from app.storage.handles import AuditTables

    tables = AuditTables.from_config(cfg, table_storage(cfg))
    found = [i for i in read_incidents(tables.incidents) if i.incident_id == args.incident]
    if not found:
        raise UsageError(f"no incident {args.incident!r}; `offset-audit incidents` lists them")
    incident = found[0]
    if not args.execute:
        plan = incident.remedy.to_json_object()
        emit(args, {"incident_id": incident.incident_id, "dry_run": True, "plan": plan}, plan_text(incident))
        return EXIT_OK
    from app.incidents import repair
    from app.runtime.session import kafka_bootstrap

    spark = spark_session(cfg)
    tables = tables.bound(spark)
    sink = tables.sink_for(str(incident.job_name))
    outcome = repair.execute(spark, cfg, incident, sink, lambda: kafka_bootstrap(cfg))
    updated = mark_resolved(tables.incidents, incident, outcome)
    if updated:
        lines = [f"incident {incident.incident_id} repaired ({incident.kind}); marked resolved"]
    else:
        lines = [f"incident {incident.incident_id} was repaired before ({incident.kind}); nothing changed"]
    done = outcome.to_json()
    lines += [f"  {json.dumps(a.to_json(), sort_keys=True)}" for a in outcome.actions]
    lines += [f"  undo: {u}" for u in outcome.undo] or ["  nothing changed in the sink"]
    summary = {"incident_id": incident.incident_id, "dry_run": False, "incident_updated": updated, **done}
    emit(args, summary, "\n".join(lines))
    return EXIT_OK
