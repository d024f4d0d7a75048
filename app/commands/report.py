"""`offset-audit report`: the static HTML dashboard (one self-contained file), optionally with a
PNG screenshot rendered by headless Chromium."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from app.commands.outcome import EXIT_OK, emit
from app.config import AppConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="HTML file (default: report.output, else <data_dir>/report/index.html)",
    )
    parser.add_argument(
        "--screenshot",
        type=Path,
        default=None,
        metavar="PATH",
        help="also render the dashboard with headless chromium into this PNG",
    )
    parser.add_argument("--run-id", default=None, help=argparse.SUPPRESS)  # tests and nightly pin it


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.pipeline import steps
    from app.pipeline.context import open_context

    # The dashboard reads small aggregates of the tables on the driver: no Spark where none runs.
    outcome = steps.report(
        open_context(cfg),
        args.run_id or f"report-{uuid.uuid4().hex[:12]}",
        output=args.output,
        screenshot=args.screenshot,
    )
    path, shot = outcome.html, outcome.png
    summary = {"report": str(path), "screenshot": None if shot is None else str(shot)}
    text = f"report written to {path}" + (f"\nscreenshot written to {shot}" if shot else "")
    emit(args, summary, text)
    return EXIT_OK
