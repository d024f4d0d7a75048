"""Options more than one subcommand takes, and how their values are read."""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.contracts.instants import instant
from app.contracts.vocabulary import ERROR, SEVERITIES

if TYPE_CHECKING:
    from app.reconcile.outputs import AuditRun


def parse_time(value: str) -> datetime:
    """ISO 8601; a time without zone is UTC (the contract's zone), never the machine's."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from exc
    return instant(parsed).astimezone(UTC)


def add_fail_on(parser: argparse.ArgumentParser, when: str) -> None:
    """The --fail-on option of the commands whose exit code 1 a scheduler acts on."""
    parser.add_argument(
        "--fail-on",
        choices=SEVERITIES,
        default=ERROR,
        help=f"exit 1 when {when} (default: {ERROR})",
    )


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    """The audit window of reconcile and forensics."""
    parser.add_argument(
        "--job",
        dest="jobs",
        action="append",
        default=[],
        metavar="JOB",
        help="audit this job (repeatable; default: reconcile.jobs, else every job)",
    )
    parser.add_argument(
        "--since",
        type=parse_time,
        default=None,
        help="ledger window start (default: end of the last successful run, else all history)",
    )
    parser.add_argument("--until", type=parse_time, default=None, help="ledger window end (default: now)")
    parser.add_argument(
        "--sink", default=None, help="sink table path (overrides tables.sink and tables.sink_by_job)"
    )
    add_fail_on(parser, "a finding at or above this severity is found")
    parser.add_argument("--run-id", default=None, help=argparse.SUPPRESS)  # tests pin it


def audit_run(args: argparse.Namespace, command: str, now: datetime) -> AuditRun:
    """The run the window arguments describe (reconcile and forensics share them)."""
    from app.reconcile.outputs import AuditRun  # with its table I/O, only when a command runs

    return AuditRun(
        run_id=args.run_id or f"{command}-{uuid.uuid4().hex[:12]}",
        now=now,
        since=args.since,
        until=args.until,
        jobs=args.jobs,
        sink_override=args.sink,
    )
