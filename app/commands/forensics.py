"""`offset-audit forensics`: classify restarts (restarts table, RESTART_* findings), or with
`--at TIME` print the incident timeline of one job around that moment."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

from app.commands.options import add_window_arguments, audit_run, parse_time
from app.commands.outcome import EXIT_FINDINGS, EXIT_OK, emit
from app.config import AppConfig
from app.contracts.vocabulary import COMMAND_FORENSICS, severity_at_least
from app.errors import UsageError

_DURATION = re.compile(r"^(\d+)([smhd])$")


def parse_duration(value: str) -> timedelta:
    m = _DURATION.match(value.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"expected a duration like 30m, 2h or 1d, got {value!r}")
    n, unit = int(m.group(1)), m.group(2)
    return timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: n})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_window_arguments(parser)
    parser.add_argument(
        "--at",
        type=parse_time,
        default=None,
        help="print the incident timeline of --job around this time instead",
    )
    parser.add_argument(
        "--around",
        type=parse_duration,
        default=timedelta(minutes=30),
        help="timeline half-width (default 30m)",
    )


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.pipeline import steps
    from app.pipeline.context import open_context
    from app.reconcile.forensics import restarts as forensics
    from app.reconcile.forensics.run import timeline

    if args.at is not None and len(args.jobs) != 1:
        raise UsageError("--at needs exactly one --job")
    ctx = open_context(cfg, sink_override=args.sink)
    if args.at is not None:
        entries = timeline(ctx.tables, job=args.jobs[0], at=args.at, around=args.around)
        emit(
            args,
            {"job": args.jobs[0], "at": args.at, "entries": entries},
            forensics.format_timeline(args.jobs[0], args.at, entries),
        )
        return EXIT_OK
    result = steps.forensics(ctx, audit_run(args, COMMAND_FORENSICS, ctx.now()))
    severities = [forensics.restart_severity(r["classification"]) for r in result.restarts]
    failing = sum(1 for s in severities if s is not None and severity_at_least(s, args.fail_on))
    lines = [f"forensics {result.run_id}: {len(result.restarts)} restarted partition(s)"]
    for r in result.restarts:
        lines.append(
            f"  {r['started_at']} {r['job_name']} run={r['run_id']} {r['topic']}/{r['partition']}: "
            f"{r['classification']} resumed={r['resumed_offset']} ({r['resume_source']}) "
            f"previous checkpoint={r['previous_checkpoint_offset']} group={r['group_committed_offset']} "
            f"replayed={r['records_replayed']} skipped={r['records_skipped']} dups={r['duplicates_observed']}"
        )
    emit(args, {"run_id": result.run_id, "restarts": result.restarts, "failing": failing}, "\n".join(lines))
    return EXIT_FINDINGS if failing else EXIT_OK
