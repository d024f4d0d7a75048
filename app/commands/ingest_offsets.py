"""`offset-audit ingest-offsets`: decode `__consumer_offsets` into group_commits, group_events,
decode_errors and ingest_positions (topic mode), or record current committed offsets (snapshot mode).

Decode errors never fail the run (exit 0); they are counted in the summary and kept in decode_errors.
"""

from __future__ import annotations

import argparse
import json

from app.commands.outcome import EXIT_OK, emit
from app.config import INGEST_MODES, AppConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--group", dest="groups", action="append", default=None, metavar="GROUP_ID",
        help="audited consumer group (repeatable); default: ingest.groups, or every group when empty",
    )  # fmt: skip
    parser.add_argument("--mode", choices=INGEST_MODES, default=None, help="default: ingest.mode")
    parser.add_argument("--run-id", default=None, help="ingest run id (default: generated)")


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.pipeline import steps
    from app.pipeline.context import open_context

    # The step asks the broker before Spark starts: exit 3 within kafka.request_timeout_s.
    result = steps.ingest(open_context(cfg), args.run_id, args.groups, args.mode)
    summary = result.as_dict()
    total = summary["total"]
    text = (
        f"ingest {result.run_id} ({result.mode}): read {total.get('read', 0)}, "
        f"decoded {total.get('decoded', 0)}, quarantined {total.get('quarantined', 0)}; "
        f"inserted {json.dumps(result.inserted, sort_keys=True)}"
    )
    for warning in result.warnings:
        text += f"\nwarning: {warning}"
    emit(args, summary, text)
    return EXIT_OK
