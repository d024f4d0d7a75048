"""`offset-audit stream`: run the reference streaming job until a stop condition or a signal."""

from __future__ import annotations

import argparse
import dataclasses

from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-batches", type=int, default=0, help="stop after this many micro-batches")
    parser.add_argument("--idle-seconds", type=float, default=0, help="stop after this long without new data")
    parser.add_argument("--duration-seconds", type=float, default=0, help="stop after this long")
    parser.add_argument("--run-id", default=None, help="run id to record (default: generated)")


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.kafka.clients import check_reachable
    from app.runtime.session import kafka_bootstrap, spark_session
    from app.stream.job import StopWhen, StreamJob, install_signal_handlers

    bootstrap = kafka_bootstrap(cfg)
    check_reachable(cfg.kafka, bootstrap)  # exit 3 in kafka.request_timeout_s, before Spark starts
    spark = spark_session(cfg)
    job = StreamJob(spark, cfg, bootstrap, run_id=args.run_id)
    install_signal_handlers(job)
    result = job.run(StopWhen(args.max_batches, args.idle_seconds, args.duration_seconds))
    summary = dataclasses.asdict(result)
    emit(
        args,
        summary,
        f"run {result.run_id}: {result.batches} batches, {result.input_rows} records, "
        f"commits ok={result.successful_commits} failed={result.failed_commits} ({result.stop_reason})",
    )
    return EXIT_OK
