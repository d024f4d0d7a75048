"""`offset-audit demo`: the embedded default, from nothing to a dashboard, through real incidents."""

from __future__ import annotations

import argparse
import sys

from app.commands.outcome import EXIT_FINDINGS, EXIT_OK, emit
from app.config import AppConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-screenshot", action="store_true", help="skip the dashboard PNG (needs chromium)"
    )
    # The demo tells its story itself (steps, incidents, the verdict): its logs show only warnings
    # and errors, the incidents' own, unless --log-level asks for more.
    parser.set_defaults(default_log_level="WARNING")
    parser.epilog = (
        "The demo narrates its steps; its logs show warnings and errors unless --log-level is given."
    )


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.demo.story import Demo
    from app.nightly.run import summary_text
    from app.runtime.session import spark_session

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    demo = Demo(
        cfg,
        spark_session(cfg),
        env=args.env,
        conf_dir=args.conf_dir,
        progress=say,
        screenshot=not args.no_screenshot,
        overrides=args.overrides,
    )
    outcome = demo.run()
    lines = [summary_text(outcome.nightly, "warn")] if outcome.nightly else []
    lines.append("injected incidents: " + ", ".join(outcome.incidents))
    for expected in outcome.expected:
        found = "found  " if expected not in outcome.missing else "MISSING"
        where = "" if expected.partition is None else f" partition {expected.partition}"
        if expected.offset_start is not None:
            where += f" [{expected.offset_start}, {expected.offset_end})"
        lines.append(
            f"  {found} {expected.severity:<8} {expected.finding_type:<20}{where} ({expected.incident})"
        )
    for row in outcome.unexpected:
        lines.append(
            f"  UNEXPECTED {row['severity']} {row['finding_type']} partition {row['partition']} "
            f"[{row['offset_start']}, {row['offset_end']}) {row['evidence']}"
        )
    lines.append("completeness per window (the dashboard's heatmap): where the records were lost")
    for (job, partition), windows in sorted(outcome.lost_by_window.items()):
        where = ", ".join(f"{n} in {start:%H:%M}" for start, n in sorted(windows.items()))
        lines.append(f"  {job} partition {partition}: {where} (UTC window starts)")
    lines.extend(f"  WRONG {error}" for error in outcome.completeness_errors)
    reported = [
        i
        for step in (outcome.nightly.steps if outcome.nightly else [])
        for i in step.summary.get("incidents", [])
    ]
    lines.append(f"incidents the audit reported: {len(reported)}")
    for i in reported:
        lines.append(f"  {i['severity']:<8} {i['kind']:<22} {i['incident_id']}  {i['cause']}")
    lines.append(
        "every injected incident was found and nothing else at warn or above"
        if outcome.ok
        else "the audit's findings differ from the injected incidents (see above)"
    )
    summary = {
        "ok": outcome.ok,
        "incidents": outcome.incidents,
        "reported_incidents": reported,
        "missing": [e.__dict__ for e in outcome.missing],
        "unexpected": outcome.unexpected,
        "completeness_errors": outcome.completeness_errors,
        "report": outcome.nightly.report if outcome.nightly else None,
        "screenshot": outcome.nightly.screenshot if outcome.nightly else None,
    }
    emit(args, summary, "\n".join(lines))
    return EXIT_OK if outcome.ok else EXIT_FINDINGS
