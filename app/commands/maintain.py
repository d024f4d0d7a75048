"""`offset-audit maintain`: compaction, log checkpoints, VACUUM and retention of every table we write."""

from __future__ import annotations

import argparse

from app.commands.options import parse_time
from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", dest="tables", action="append", default=[], metavar="TABLE",
                        help="only this table (repeatable; default: every table we write)")  # fmt: skip
    parser.add_argument("--now", type=parse_time, default=None,
                        help="the clock of closed days and retention (default: now)")  # fmt: skip


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.errors import UsageError
    from app.maintenance.run import maintained_tables, summary_text
    from app.pipeline import steps
    from app.pipeline.context import open_context

    known = maintained_tables(cfg)
    unknown = [t for t in args.tables if t not in known]
    if unknown:
        raise UsageError(f"--table {unknown[0]}: not a table maintain keeps; known: {', '.join(known)}")
    ctx = open_context(cfg)
    result = steps.maintain(ctx, args.now or ctx.now(), only=args.tables)
    emit(args, result.to_json(), summary_text(result))
    return EXIT_OK
