"""`offset-audit flink-watch`: follow a running Flink job from its JobManager's REST API and write
its ledger (`app.flink.watcher`)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
from typing import TYPE_CHECKING

from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.errors import UsageError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from app.flink.watcher import WatchSummary
    from app.runtime.signals import StopSignal


def positive_seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}") from exc
    if not number > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rest", required=True, metavar="URL", help="the JobManager's REST address, http://host:8081"
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--job-id", default=None, metavar="ID", help="the Flink job id to follow until it ends"
    )
    which.add_argument(
        "--job-name",
        default=None,
        metavar="NAME",
        help="follow the newest Flink job of this name, and each resubmission of it, until stopped",
    )
    parser.add_argument("--job", required=True, help="the job name its ledger events carry")
    parser.add_argument(
        "--group-id",
        default=None,
        metavar="G",
        help="the consumer group the job commits its checkpoints' offsets to (its Kafka source's group.id)",
    )
    parser.add_argument("--ledger", default=None, help="the ledger table (default: tables.ledger)")
    parser.add_argument(
        "--poll-interval",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="seconds between two polls (default 1; keep it well inside the checkpoint interval times "
        "the retained checkpoints)",
    )
    parser.add_argument(
        "--starting-offsets",
        choices=vocab.STARTUP_MODES,
        default=None,
        help="where the job's sources start without state, as configured (Flink does not expose it): the "
        "broker's offsets for it are recorded as where such a run started",
    )
    parser.add_argument(
        "--starting-offsets-key",
        default=None,
        metavar="KEY",
        help="the job parameter naming its startup mode (earliest|latest|committed|group, or Flink "
        "SQL's earliest-offset|latest-offset|group-offsets) among the parameters the job publishes "
        "(its global job parameters, else its configuration); wins over --starting-offsets",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for the REST API at start (a sidecar started beside its JobManager; "
        "default 0: unreachable at start exits 3)",
    )
    parser.add_argument("--max-polls", type=int, default=None, help=argparse.SUPPRESS)  # tests bound the loop


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    if not args.job.strip():
        raise UsageError("--job must name the job")
    if args.job_id is not None and not args.job_id.strip():
        raise UsageError("--job-id must name the Flink job")
    if args.wait < 0:
        raise UsageError(f"--wait must be zero or more seconds, not {args.wait}")
    if args.max_polls is not None and args.max_polls <= 0:
        raise UsageError(f"--max-polls must be positive, not {args.max_polls}")
    from app.runtime.signals import StopSignal
    from app.storage.handles import AuditTables

    ledger = args.ledger or AuditTables.from_config(cfg, None).ledger.location
    stop = StopSignal()
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stop.install()
    try:
        summary = _watch(args, cfg, ledger, stop)
    finally:
        # In process (the tests, a caller of `main`), the caller's handlers come back.
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    followed = args.job_id or f"named {args.job_name}"
    emit(
        args,
        {**dataclasses.asdict(summary), "job": args.job, "ledger": ledger, "rest": args.rest},
        f"flink-watch of Flink job {followed} as job {args.job}: runs {', '.join(summary.runs) or 'none'}; "
        f"{summary.checkpoints_recorded} checkpoints recorded, {len(summary.missed)} missed, "
        f"{summary.failed_checkpoints} failed; {summary.failed_commits} commits failed (source metrics); "
        f"{summary.events_written} events, "
        f"{summary.rest_requests} REST requests",
    )
    return EXIT_OK


def _bootstrap(cfg: AppConfig) -> str | None:
    """The broker the sidecar asks where a run without state started: kafka.bootstrap_servers, or the
    embedded broker's; None (no start offsets recorded) when `local` names none running."""
    from app.errors import KafkaUnavailableError
    from app.runtime.session import kafka_bootstrap

    try:
        return kafka_bootstrap(cfg)
    except KafkaUnavailableError as exc:
        log.warning("flink-watch: %s; runs started without state get no start offsets", exc)
        return None


def _watch(args: argparse.Namespace, cfg: AppConfig, ledger: str, stop: StopSignal) -> WatchSummary:
    from app.audit import watch_flink_job

    return watch_flink_job(
        args.rest,
        job_name=args.job,
        ledger=ledger,
        flink_job_id=args.job_id,
        flink_job_name=args.job_name,
        group_id=args.group_id,
        poll_s=args.poll_interval,
        startup_mode=args.starting_offsets,
        startup_key=args.starting_offsets_key,
        kafka=cfg.kafka,
        bootstrap=_bootstrap(cfg),
        storage_options=cfg.storage.options,
        stop=stop,
        max_polls=args.max_polls,
        wait_s=args.wait,
    )
