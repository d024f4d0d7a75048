"""`offset-audit check`: Great Expectations suites over ledger, group_commits, findings and
partition_summary; outcomes into the validation_results table, Data Docs into checks.data_docs_dir."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from app.commands.options import add_fail_on
from app.commands.outcome import EXIT_FINDINGS, EXIT_OK, emit
from app.config import AppConfig
from app.contracts.vocabulary import severity_at_least


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_fail_on(parser, "an expectation of this severity or above fails")
    parser.add_argument(
        "--reconcile-run",
        default=None,
        metavar="RUN_ID",
        help="check the findings and summary of this reconcile run (default: the latest successful one)",
    )
    parser.add_argument("--no-docs", action="store_true", help="do not build Data Docs")
    parser.add_argument("--run-id", default=None, help=argparse.SUPPRESS)  # tests and nightly pin it


def summary_text(summary: Any, fail_on: str) -> str:
    lines = [f"check {summary.run_id}: reconcile run {summary.reconcile_run_id or 'all'}"]
    for suite in summary.suites:
        if suite.skipped:
            lines.append(f"  -  {suite.name:<34} skipped ({suite.skipped})")
            continue
        failed = [e for e in suite.expectations if not e.success]
        verdict = "ok" if not failed else f"{len(failed)} of {len(suite.expectations)} failed"
        lines.append(f"  {'ok' if not failed else '!!'} {suite.name:<34} {verdict}")
        for e in failed:
            mark = "!" if severity_at_least(e.severity, fail_on) else " "
            lines.append(f"     {mark} {e.severity:<8} {e.label}  {short_observed(e.observed)}")
    if summary.data_docs:
        lines.append(f"  Data Docs: {summary.data_docs}")
    return "\n".join(lines)


def short_observed(observed: dict[str, Any]) -> str:
    """The one or two numbers a person needs, not GE's whole result."""
    if "exception" in observed:
        return f"error: {observed['exception']}"
    if "observed_value" in observed:
        return f"observed {observed['observed_value']}"
    sample = observed.get("partial_unexpected_list", [])[:3]
    return f"{observed.get('unexpected_count', '?')} unexpected, e.g. {sample}"


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.pipeline import steps
    from app.pipeline.context import open_context
    from app.quality import preload

    preload.start()  # Great Expectations' import overlaps with the Spark session's start
    ctx = open_context(cfg)
    ctx.start_spark()  # while Great Expectations imports
    from app.quality.checks import CheckOptions

    summary = steps.check(
        ctx,
        args.run_id or f"check-{uuid.uuid4().hex[:12]}",
        CheckOptions(build_docs=not args.no_docs, reconcile_run_id=args.reconcile_run),
    )
    failing = summary.failed(args.fail_on)
    out = summary.to_json() | {"fail_on": args.fail_on, "failing_expectations": len(failing)}
    emit(args, out, summary_text(summary, args.fail_on))
    return EXIT_FINDINGS if failing else EXIT_OK
