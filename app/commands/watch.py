"""`offset-audit watch`: ingest, reconcile, alert and refresh the dashboard every --interval seconds."""

from __future__ import annotations

import argparse

from app.commands.outcome import EXIT_OK, EXIT_USAGE
from app.config import AppConfig
from app.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval",
        type=float,
        default=60.0,
        help="seconds from the start of one cycle to the start of the next (default 60)",
    )
    parser.add_argument(
        "--max-cycles", type=int, default=None, help="stop after this many cycles (default: until stopped)"
    )


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    if args.interval <= 0:
        raise UsageError(f"--interval must be a positive number of seconds, not {args.interval}")
    if args.max_cycles is not None and args.max_cycles <= 0:
        raise UsageError(f"--max-cycles must be positive, not {args.max_cycles}")
    from app.pipeline.context import open_context
    from app.runtime.signals import StopSignal
    from app.watch.loop import Watch

    stop = StopSignal()
    stop.install()  # before the session starts: a stop during start-up ends before the first cycle
    ctx = open_context(cfg)

    def say(line: str) -> None:
        print(line, flush=True)

    watch = Watch(ctx, args.interval, stop, say)
    try:
        # The Flink followers first: Flink deletes checkpoints while the session starts.
        watch.flink.start()
        ctx.start_spark()  # once, before the first cycle: every cycle uses it
        cycles = watch.run(args.max_cycles)
    finally:
        watch.flink.close()
    if len(cycles) == 1 and cycles[0].error_kind == "usage":
        return EXIT_USAGE  # a configuration error, found by the first cycle
    return EXIT_OK
