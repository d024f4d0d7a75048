"""Every entry point ends with the documented exit code, every time, never with a signal.

The subcommands that read Delta tables with delta-rs run again and again as fresh processes, through
each entry point a scheduler uses: `python -m app.cli`, the console script as pip generates it from
pyproject's [project.scripts], and the spark-submit entry points in jobs/ (run by Python directly,
as the driver process spark-submit starts would). Each runs with the broker up and with it
unreachable. Before the exit was made explicit, such a process aborted now and then after its work
was done (SIGABRT from a native thread pool at interpreter shutdown: returncode -6, a shell's 134).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.commands import outcome
from app.runtime.jvm import REPO_ROOT
from tests.audit_tables import AuditTables, write_audit_tables

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

COMMAND_TIMEOUT_S = 600  # a deadline for a hung process (reconcile starts Spark), not a speed check
KAFKA_TIMEOUT_S = 3  # how long an unreachable broker is waited for (requests, gap confirmation)


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    job: str | None  # jobs/<job>.py, the spark-submit entry point; None: the command has none
    up: int | None  # the documented code with the broker up (None: not run, it would change the tables)
    down: int  # the documented code with the broker unreachable
    repeats: int  # runs per entry point and broker state


def cases(audit: AuditTables, out: Path) -> dict[str, Case]:
    return {
        # an open critical incident, at --fail-on critical
        "incidents": Case(("incidents", "--fail-on", "critical"), "incidents", 1, 1, 3),
        "repair-plan": Case(("repair", "--incident", audit.restart_incident), "repair", 0, 0, 3),
        "report": Case(("report", "--output", str(out / "report.html")), "report", 0, 0, 2),
        "config-show": Case(("config", "show"), None, 0, 0, 3),
        "forensics-at": Case(
            ("forensics", "--job", audit.job, "--at", audit.moment.isoformat()), "forensics", 0, 0, 3
        ),
        # the sink lacks offsets a checkpoint completed: confirming the gap needs the broker
        "reconcile": Case(("reconcile",), "reconcile", None, outcome.EXIT_INFRA, 1),
        "ingest-offsets": Case(("ingest-offsets",), "ingest_offsets", None, outcome.EXIT_INFRA, 2),
    }


def entry_points(case: Case) -> dict[str, list[str]]:
    """The command line of ``case`` through each entry point."""
    script = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]["offset-audit"]
    module, function = script.split(":")
    console = f"import sys; from {module} import {function} as entry; sys.exit(entry())"  # pip's wrapper
    found = {
        "python -m app.cli": [sys.executable, "-m", "app.cli", *case.argv],
        "console script": [sys.executable, "-c", console, *case.argv],
    }
    if case.job is not None:  # the job's file names the subcommand
        found[f"jobs/{case.job}.py"] = [
            sys.executable,
            str(REPO_ROOT / "jobs" / f"{case.job}.py"),
            *case.argv[1:],
        ]
    return found


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> AuditTables:
    return write_audit_tables(tmp_path_factory.mktemp("exit-codes") / "data")


@pytest.fixture(scope="module")
def unreachable() -> Iterator[str]:
    """A loopback address where nothing listens (its port held, never accepting)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        yield f"127.0.0.1:{held.getsockname()[1]}"


@dataclass(frozen=True)
class Outcome:
    entry: str
    broker: str
    returncode: int
    stderr: str


@pytest.mark.parametrize(
    "name",
    ["incidents", "repair-plan", "report", "config-show", "forensics-at", "reconcile", "ingest-offsets"],
)
def test_every_run_of_every_entry_point_ends_with_the_documented_code(
    name: str, audit: AuditTables, bootstrap: str, unreachable: str, tmp_path: Path
) -> None:
    case = cases(audit, tmp_path)[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)  # jobs/*.py import this checkout's app, as --py-files ships it
    states = {"unreachable": (unreachable, case.down)}
    if case.up is not None:
        states["up"] = (bootstrap, case.up)
    outcomes: list[Outcome] = []
    expected: dict[str, int] = {}
    for entry, argv in entry_points(case).items():
        for broker, (servers, code) in states.items():
            expected[broker] = code
            overrides = [
                *("--set", f"paths.data_dir={audit.data_dir}"),
                *("--set", f"kafka.bootstrap_servers={servers}"),
                *("--set", f"kafka.request_timeout_s={KAFKA_TIMEOUT_S}"),
                *("--set", f"reconcile.confirm_timeout_s={KAFKA_TIMEOUT_S}"),
            ]
            for _ in range(case.repeats):
                done = subprocess.run(
                    [*argv, *overrides],
                    cwd=REPO_ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT_S,
                )
                outcomes.append(Outcome(entry, broker, done.returncode, done.stderr[-2000:]))
    signalled = [o for o in outcomes if o.returncode < 0]
    assert signalled == [], f"{len(signalled)} of {len(outcomes)} runs ended by a signal"
    wrong = [o for o in outcomes if o.returncode != expected[o.broker]]
    assert wrong == [], f"{len(wrong)} of {len(outcomes)} runs ended with another code than {expected}"
