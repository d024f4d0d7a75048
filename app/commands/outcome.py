"""What a command hands back: its exit code and its final print.

The exit codes are the scheduler contract (README, "Exit codes"); every subcommand and the CLI take
them from here, and print their result through ``emit``, so commands never import the CLI.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

EXIT_OK: Final = 0  # clean
EXIT_FINDINGS: Final = 1  # findings (or failed checks) at or above --fail-on
EXIT_USAGE: Final = 2  # usage or configuration error
EXIT_INFRA: Final = 3  # infrastructure (or internal) error; a failed nightly step
EXIT_INTERRUPTED: Final = 130  # the shell's code for SIGINT
EXIT_READER_GONE: Final = 141  # the shell's code for SIGPIPE: the output's reader closed it (`| head`)


def emit(args: argparse.Namespace, summary: dict[str, Any], text: str) -> None:
    """One place that prints results: JSON for machines (``--json``), text for people."""
    if getattr(args, "json", False):
        print(json.dumps(summary, sort_keys=True, default=str))
    else:
        print(text)
