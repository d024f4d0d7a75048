"""`offset-audit ledger-import`: backfill a job's ledger from an existing Spark checkpoint."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig
from app.errors import UsageError


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value!r}") from exc
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value!r}")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="the query's checkpoint directory (its checkpointLocation: a local path or a URI, e.g. s3a://)",
    )
    parser.add_argument("--job", required=True, help="the job name its ledger events carry")
    parser.add_argument("--ledger", default=None, help="the ledger table (default: tables.ledger)")
    parser.add_argument(
        "--progress-every",
        type=positive,
        default=100,
        metavar="N",
        help="print a progress line every N batches (default 100)",
    )


def print_progress(done: int, total: int) -> None:
    # stderr: stdout holds the result alone (--json reads it).
    print(f"ledger-import: {done}/{total} batches", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.runtime.session import spark_session
    from app.storage.tables import tables_from_config
    from app.stream.checkpoint import CheckpointFiles
    from app.stream.ledger_import import import_checkpoint

    directory = str(args.checkpoint).rstrip("/")
    if not directory:
        raise UsageError("--checkpoint must name the checkpoint directory")
    if not args.job.strip():
        raise UsageError("--job must name the job")
    ledger = args.ledger or tables_from_config(cfg).ledger
    spark = spark_session(cfg)
    result = import_checkpoint(
        CheckpointFiles(spark, directory),
        ledger,
        args.job,
        progress=print_progress,
        progress_every=args.progress_every,
    )
    retained = (
        f"batches {result.oldest_batch}..{result.newest_batch} retained"
        if result.oldest_batch is not None
        else "no batches retained"
    )
    emit(
        args,
        {**dataclasses.asdict(result), "checkpoint": directory, "job": args.job, "ledger": ledger},
        f"ledger-import of {directory} as job {args.job}, run {result.run_id}: {retained}; "
        f"{result.batches_imported} batches imported ({result.events_written} events), "
        f"{result.batches_recorded} already in the ledger",
    )
    return EXIT_OK
