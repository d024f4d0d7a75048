"""Every entry point ends with the documented exit code, never with a signal.

The subcommands that read Delta tables with delta-rs end with the same code with the broker up and
with it unreachable; the ones that need the broker end with 3 when it is unreachable. A scheduler
starts them through one of three entry points: `python -m app.cli`, the console script as pip
generates it from pyproject's [project.scripts], and the spark-submit entry points in jobs/ (run by
Python directly, as the driver process spark-submit starts would). All three hand the command line
to ``cli.run_and_exit``, which ends the process with exactly the code of ``cli.main``.

So the claims are checked where they live. Which code each command and broker state maps to is
``cli.main``'s: every command x broker state runs in process. That each entry point hands its
command line to ``run_and_exit`` is checked in process too (each jobs/ file run as ``__main__``, the
console script's target read from pyproject). That ``run_and_exit`` really ends a process with that
code, and never with a signal, is what only a process can show: one child per documented code,
spread over the three entry points. Before the exit was made explicit, such a process aborted after
its work was done (SIGABRT from a native thread pool at interpreter shutdown: returncode -6, a
shell's 134); ``run_and_exit`` now skips that shutdown, so one run per claim takes the path.
"""

from __future__ import annotations

import importlib
import os
import runpy
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app import cli
from app.commands import outcome
from app.runtime.jvm import REPO_ROOT
from tests.support.audit_tables import AuditTables, write_audit_tables
from tests.support.config import set_options

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

COMMAND_TIMEOUT_S = 600  # a deadline for a hung process, not a speed check
KAFKA_TIMEOUT_S = 3  # how long an unreachable broker is waited for (requests, gap confirmation)


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    job: str | None  # jobs/<job>.py, the spark-submit entry point; None: the command has none
    up: int | None  # the documented code with the broker up (None: not run, it would change the tables)
    down: int  # the documented code with the broker unreachable


def cases(audit: AuditTables, out: Path) -> dict[str, Case]:
    return {
        # an open critical incident, at --fail-on critical
        "incidents": Case(("incidents", "--fail-on", "critical"), "incidents", 1, 1),
        "repair-plan": Case(("repair", "--incident", audit.restart_incident), "repair", 0, 0),
        "report": Case(("report", "--output", str(out / "report.html")), "report", 0, 0),
        "config-show": Case(("config", "show"), None, 0, 0),
        "forensics-at": Case(
            ("forensics", "--job", audit.job, "--at", audit.moment.isoformat()), "forensics", 0, 0
        ),
        "ingest-offsets": Case(("ingest-offsets",), "ingest_offsets", None, outcome.EXIT_INFRA),
        # the sink lacks offsets a checkpoint completed: confirming the gap needs the broker
        "reconcile": Case(("reconcile",), "reconcile", None, outcome.EXIT_INFRA),
    }


def overrides(data_dir: Path, servers: str) -> list[str]:
    return set_options(
        f"kafka.bootstrap_servers={servers}",
        f"kafka.request_timeout_s={KAFKA_TIMEOUT_S}",
        f"reconcile.confirm_timeout_s={KAFKA_TIMEOUT_S}",
        data_dir=data_dir,
    )


def console_script_target() -> str:
    """``module:function`` of the `offset-audit` console script, as pip reads it."""
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return str(scripts["offset-audit"])


def entry_point(entry: str, case: Case, options: Sequence[str]) -> list[str]:
    """The command line of ``case`` with ``options`` through ``entry``."""
    if entry == "python -m app.cli":
        return [sys.executable, "-m", "app.cli", *case.argv, *options]
    if entry == "console script":
        module, function = console_script_target().split(":")
        wrapper = f"import sys; from {module} import {function} as entry; sys.exit(entry())"  # pip's wrapper
        return [sys.executable, "-c", wrapper, *case.argv, *options]
    assert case.job is not None
    # the job's file names the subcommand
    return [sys.executable, str(REPO_ROOT / "jobs" / f"{case.job}.py"), *case.argv[1:], *options]


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> AuditTables:
    return write_audit_tables(tmp_path_factory.mktemp("exit-codes") / "data")


@pytest.fixture(scope="module")
def unreachable() -> Iterator[str]:
    """A loopback address where nothing listens (its port held, never accepting)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        yield f"127.0.0.1:{held.getsockname()[1]}"


# One child per documented code, the three entry points among them: (entry, case, broker state).
CHILDREN = {
    outcome.EXIT_OK: ("python -m app.cli", "report", "unreachable"),
    outcome.EXIT_FINDINGS: ("console script", "incidents", "up"),
    outcome.EXIT_USAGE: ("console script", "config-show", "bad config"),
    outcome.EXIT_INFRA: ("jobs/", "ingest-offsets", "unreachable"),
}


@pytest.mark.parametrize("code", sorted(CHILDREN))
def test_a_process_ends_with_exactly_the_documented_code(
    code: int, audit: AuditTables, bootstrap: str, unreachable: str, tmp_path: Path
) -> None:
    entry, name, broker = CHILDREN[code]
    case = cases(audit, tmp_path)[name]
    servers = bootstrap if broker == "up" else unreachable
    options = overrides(audit.data_dir, servers)
    if broker == "bad config":
        options += ["--set", "kafka.request_timeout_s=soon"]  # not a number: a configuration error
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)  # jobs/*.py import this checkout's app, as --py-files ships it
    done = subprocess.run(
        entry_point(entry, case, options),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert done.returncode == code, (entry, name, broker, done.returncode, done.stderr[-2000:])


def test_every_entry_point_hands_its_command_line_to_run_and_exit(
    audit: AuditTables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console script is ``run_and_exit``; each jobs/ file runs it with its own subcommand."""
    module, function = console_script_target().split(":")
    assert getattr(importlib.import_module(module), function) is cli.run_and_exit

    handed: list[list[str]] = []

    def record(argv: Sequence[str] | None = None) -> None:
        handed.append(list(argv or []))

    monkeypatch.setattr(cli, "run_and_exit", record)  # jobs/ import it by name when they run
    jobs = [case for case in cases(audit, tmp_path).values() if case.job is not None]
    for case in jobs:
        monkeypatch.setattr(sys, "argv", [f"{case.job}.py", *case.argv[1:]])
        runpy.run_path(str(REPO_ROOT / "jobs" / f"{case.job}.py"), run_name="__main__")
    assert handed == [list(case.argv) for case in jobs]


def in_process(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err[-2000:]


def test_every_command_maps_each_broker_state_to_its_documented_code(
    spark: SparkSession,
    audit: AuditTables,
    bootstrap: str,
    unreachable: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With the session's Spark running, so that the outcome does not hang on which tests ran before
    (the commands that read on the driver read through a running session: session.table_storage)."""
    wrong = []
    for name, case in cases(audit, tmp_path).items():
        if name == "reconcile":
            continue  # it may write to the tables the others read: the last test
        states = {"unreachable": (unreachable, case.down)}
        if case.up is not None:
            states["up"] = (bootstrap, case.up)
        for broker, (servers, expected) in states.items():
            code, err = in_process([*case.argv, *overrides(audit.data_dir, servers)], capsys)
            if code != expected:
                wrong.append((name, broker, code, expected, err))
    assert wrong == []


def test_reconcile_with_the_broker_unreachable_exits_3(
    spark: SparkSession,
    audit: AuditTables,
    unreachable: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Last in this module: a reconcile may leave its run record in the tables the others read."""
    case = cases(audit, tmp_path)["reconcile"]
    code, err = in_process([*case.argv, *overrides(audit.data_dir, unreachable)], capsys)
    assert (code, err.startswith("offset-audit: infrastructure error")) == (case.down, True), err
