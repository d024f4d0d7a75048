"""`offset-audit reconcile`: ledger x group commits x sink -> findings and partition_summary."""

from __future__ import annotations

import argparse
from typing import Any

from app.commands.incidents import incidents_text
from app.commands.options import add_window_arguments, audit_run
from app.commands.outcome import EXIT_FINDINGS, EXIT_OK, emit
from app.config import AppConfig
from app.contracts.vocabulary import COMMAND_RECONCILE, SEVERITIES, severity_at_least
from app.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_window_arguments(parser)
    parser.add_argument(
        "--no-confirm",
        action="store_true",
        help="do not read suspected gaps back from Kafka (they stay 'open')",
    )


def _windows_text(written: int | None) -> str:
    return "none (the source could not be asked)" if written is None else str(written)


def summary_text(result: Any, fail_on: str) -> str:
    w = result.window
    lines = [
        f"reconcile {result.run_id}: jobs {', '.join(result.jobs) or 'all'}, "
        f"window [{w.since.isoformat() if w.since else 'beginning'}, {w.until.isoformat()})",
        f"  partitions audited: {result.partitions}; suspected gaps: {result.gaps_suspected} "
        f"(confirmation: {result.confirmation}); {result.seconds:.1f}s",
        f"  completeness windows written: {_windows_text(result.completeness_windows)}",
    ]
    if not result.counts:
        lines.append("  no findings")
    for (ftype, sev), n in sorted(
        result.counts.items(), key=lambda kv: (SEVERITIES.index(kv[0][1]), kv[0][0])
    ):
        settled = result.settled.get((ftype, sev), 0)
        mark = "!" if severity_at_least(sev, fail_on) and n > settled else " "
        note = f" ({settled} of resolved incidents)" if settled else ""
        lines.append(f"  {mark} {sev:<8} {ftype:<24} {n}{note}")
    if result.incidents:
        lines.append(f"  incidents ({len(result.incidents)}):")
        lines += ["    " + line for line in incidents_text(result.incidents).splitlines()]
    if result.top:
        lines.append("  most severe findings:")
        for f in result.top[:5]:
            lines.append(
                f"    {f.severity:<8} {f.finding_type:<22} {f.status:<12} {f.job_name} "
                f"{f.topic}/{f.partition} [{f.offset_start}, {f.offset_end}) n={f.record_count}"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.incidents.incident import summaries_json
    from app.pipeline import steps
    from app.pipeline.context import open_context

    if args.since and args.until and args.since >= args.until:
        raise UsageError("--since must be before --until")
    ctx = open_context(cfg, sink_override=args.sink)
    result = steps.reconcile(ctx, audit_run(args, COMMAND_RECONCILE, ctx.now()), confirm=not args.no_confirm)
    failing = result.failing(args.fail_on)
    summary = {
        "run_id": result.run_id,
        "jobs": result.audited_jobs,
        "jobs_requested": result.jobs,
        "since": result.window.since,
        "until": result.window.until,
        "partitions": result.partitions,
        "gaps_suspected": result.gaps_suspected,
        "confirmation": result.confirmation,
        "findings": [
            {
                "finding_type": t,
                "severity": s,
                "count": n,
                "of_resolved_incidents": result.settled.get((t, s), 0),
            }
            for (t, s), n in sorted(result.counts.items())
        ],
        "failing_findings": failing,
        "incidents": summaries_json(result.incidents),
        "fail_on": args.fail_on,
        "completeness_windows": result.completeness_windows,
        "seconds": round(result.seconds, 2),
    }
    emit(args, summary, summary_text(result, args.fail_on))
    return EXIT_FINDINGS if failing else EXIT_OK
