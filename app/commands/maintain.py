"""`offset-audit maintain`: compaction, log checkpoints, VACUUM and retention of every table we write."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

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
    from app.maintenance.run import maintain, maintained_tables, summary_text
    from app.runtime.session import table_storage

    known = maintained_tables(cfg)
    unknown = [t for t in args.tables if t not in known]
    if unknown:
        raise UsageError(f"--table {unknown[0]}: not a table maintain keeps; known: {', '.join(known)}")
    result = maintain(table_storage(cfg), cfg, args.now or datetime.now(UTC), only=args.tables)
    emit(args, result.to_json(), summary_text(result))
    return EXIT_OK
