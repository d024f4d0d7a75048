"""`offset-audit nightly`: ingest-offsets -> reconcile -> forensics -> check -> report, one run id."""

from __future__ import annotations

import argparse
import dataclasses

from app.commands.options import add_fail_on, parse_time
from app.commands.outcome import EXIT_FINDINGS, EXIT_INFRA, EXIT_OK, EXIT_USAGE, emit
from app.config import AppConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-id",
        default=None,
        help="run id; give a failed night's id to finish it (done steps are skipped)",
    )
    add_fail_on(parser, "findings or failed expectations reach this severity")
    parser.add_argument("--screenshot", action="store_true", help="also render the dashboard to a PNG")
    parser.add_argument(
        "--now",
        type=parse_time,
        default=None,
        help="the night's clock: its window's end, the closed days and retention (default: now)",
    )


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.nightly.run import Nightly, summary_text
    from app.pipeline.context import open_context
    from app.quality import preload

    preload.start()  # Great Expectations' import overlaps with the Spark session's start
    nightly = Nightly(open_context(cfg), args.run_id, now=args.now, screenshot=args.screenshot)
    result = nightly.run()
    summary = dataclasses.asdict(result) | {"failing": result.failing(args.fail_on), "fail_on": args.fail_on}
    emit(args, summary, summary_text(result, args.fail_on))
    if result.failed_step is not None:
        return EXIT_USAGE if result.failed_step.error_kind == "usage" else EXIT_INFRA
    return EXIT_FINDINGS if result.failing(args.fail_on) else EXIT_OK
