"""`offset-audit flink-import`: backfill a job's ledger from retained Flink checkpoints and savepoints
(`app.flink.import_`)."""

from __future__ import annotations

import argparse
import dataclasses

from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig
from app.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--path",
        required=True,
        help=(
            "a directory holding Flink checkpoints (chk-N under the job id's directory) or savepoints: "
            "local, or s3a:// (s3://, s3p://) reached with storage.options"
        ),
    )
    parser.add_argument("--job", required=True, help="the job name its ledger events carry")
    parser.add_argument(
        "--group-id", default=None, metavar="G", help="the consumer group the job commits its checkpoints to"
    )
    parser.add_argument("--ledger", default=None, help="the ledger table (default: tables.ledger)")


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    path = str(args.path).rstrip("/")
    if not path:
        raise UsageError("--path must name a directory")
    if not args.job.strip():
        raise UsageError("--job must name the job")
    from app.audit import import_flink_checkpoints
    from app.storage.handles import AuditTables

    ledger = args.ledger or AuditTables.from_config(cfg, None).ledger.location
    result = import_flink_checkpoints(
        path, job_name=args.job, ledger=ledger, group_id=args.group_id, storage_options=cfg.storage.options
    )
    span = (
        f"checkpoints {result.oldest_checkpoint}..{result.newest_checkpoint} retained"
        if result.oldest_checkpoint is not None
        else "nothing readable retained"
    )
    emit(
        args,
        {**dataclasses.asdict(result), "job": args.job, "ledger": ledger},
        f"flink-import of {path} as job {args.job}: {result.found} found, {span}; {result.imported} imported "
        f"({result.events_written} events), {result.already_recorded} already in the ledger, "
        f"{len(result.unreadable)} unreadable, "
        f"{len(result.unassigned_savepoints)} savepoints of unknown jobs",
    )
    return EXIT_OK
