"""`offset-audit ledger-import`: backfill a job's ledger from an existing Spark checkpoint."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig, check_iceberg_address
from app.contracts import vocabulary as vocab
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
        "--sink",
        default=None,
        metavar="PATH",
        help="the query's Delta sink: its transaction log checks and dates the imported batches",
    )
    parser.add_argument(
        "--sink-app-id",
        default=None,
        metavar="ID",
        help="the txn app id of the sink's commits (default: the query's id, as Spark's Delta sink "
        "writes; a foreachBatch's own txnAppId)",
    )
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


def sink_summary(result: Mapping[str, Any]) -> str:
    """What the sink's log said of the imported completions ('' without --sink); ``result``: the
    import's `ImportResult` as a dict."""
    if result["sink"] is None:
        return ""
    oldest = result["oldest_verifiable_batch"]
    verifiable = "no retained batch is verifiable"
    if oldest is not None:
        verifiable = f"batches from {oldest} on are verifiable"
    return (
        f"; sink {result['sink']} (app id {result[vocab.DETAIL_SINK_APP_ID]}, log from version "
        f"{result['sink_log_first_version']}): it holds {result['sink_holds']} of the imported "
        f"completions, lacks {result['sink_lacks']} (lost batches: reconcile names them), "
        f"{result['sink_unverifiable']} beyond its log's retention; {verifiable}"
    )


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.runtime.session import spark_session, table_storage
    from app.storage.handles import AuditTables
    from app.stream.checkpoint import CheckpointFiles
    from app.stream.ledger_import import check_inputs, import_checkpoint

    directory = str(args.checkpoint).rstrip("/")
    if not directory:
        raise UsageError("--checkpoint must name the checkpoint directory")
    if not args.job.strip():
        raise UsageError("--job must name the job")
    sink = None if args.sink is None else str(args.sink).rstrip("/")
    if sink == "":
        raise UsageError("--sink must name the sink's Delta or Iceberg table")
    if args.sink_app_id is not None and (sink is None or not args.sink_app_id.strip()):
        raise UsageError("--sink-app-id needs --sink and must name the txn app id")
    ledger = args.ledger or AuditTables.from_config(cfg, None).ledger.location
    # A wrong path answers before Spark starts (tens of seconds on a busy machine) where it can.
    if sink is not None:
        check_iceberg_address(sink, cfg.iceberg, "--sink")
    check_inputs(table_storage(cfg), directory, sink, args.sink_app_id, cfg.iceberg)
    spark = spark_session(cfg)
    result = import_checkpoint(
        CheckpointFiles(spark, directory),
        ledger,
        args.job,
        progress=print_progress,
        progress_every=args.progress_every,
        sink=sink,
        sink_app_id=args.sink_app_id,
        catalogs=cfg.iceberg,
    )
    retained = (
        f"batches {result.oldest_batch}..{result.newest_batch} retained"
        if result.oldest_batch is not None
        else "no batches retained"
    )
    summary = dataclasses.asdict(result)
    emit(
        args,
        {**summary, "checkpoint": directory, "job": args.job, "ledger": ledger},
        f"ledger-import of {directory} as job {args.job}, run {result.run_id}: {retained}; "
        f"{result.batches_imported} batches imported ({result.events_written} events), "
        f"{result.batches_recorded} already in the ledger{sink_summary(summary)}",
    )
    return EXIT_OK
