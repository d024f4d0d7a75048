"""What a person types in an incident answers without starting Spark: `incidents`, a repair plan,
`forensics --at` and the dashboard read the tables on the driver through delta-rs; they, `config
show` and every `--help` start no JVM.

They all run in one fresh process (no JVM can be running in it already) with `java` replaced by a
stand-in that records any call and fails: a command that tried to start Spark (or any JVM) leaves a
record and fails, whatever the timing. The same process first builds the parser and reports what
that imported: none of the engines (pyspark, pyarrow, delta-rs, Kafka's client), so a `--help`
costs the interpreter's start and the config module only. What each `--help` prints is checked in
this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.commands.outcome import EXIT_FINDINGS, EXIT_OK
from app.runtime.jvm import REPO_ROOT
from tests.audit_tables import AuditTables, write_audit_tables

pytestmark = pytest.mark.unit

COMMAND_TIMEOUT_S = 300  # a deadline for a hung process, not a speed check

# What the commands' work needs and a parser does not (their imports were two thirds of `--help`'s time).
ENGINES = ("pyspark", "py4j", "pyarrow", "deltalake", "confluent_kafka", "duckdb", "great_expectations")

HELPS = [[], *([c] for c in ["config", "setup-jvm", "kafka-local", *cli.COMMANDS])]

# Run as the child: argv[1] is a JSON list of command lines. Prints the engines the parser imported
# and each command line's code and output, as one JSON line.
PROBE = """
import contextlib, io, json, os, sys
from app import cli
cli.build_parser()
engines = [m for m in ENGINES if m in sys.modules]
runs = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    runs.append({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()[-2000:]})
print(json.dumps({"engines": engines, "runs": runs}))
sys.stdout.flush()
os._exit(0)  # as cli.run_and_exit does: no interpreter shutdown for native thread pools to abort
""".replace("ENGINES", repr(ENGINES))


@dataclass(frozen=True)
class Probe:
    engines: list[str]
    expected: dict[tuple[str, ...], tuple[int, str]]  # interactive(): code and printed piece
    runs: dict[tuple[str, ...], dict[str, Any]]  # by command line, without the data_dir override
    java_calls: str


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> AuditTables:
    return write_audit_tables(tmp_path_factory.mktemp("interactive") / "data")


def interactive(audit: AuditTables, out: Path) -> dict[tuple[str, ...], tuple[int, str]]:
    """Each interactive command line, with the code it ends with and a piece of what it prints."""
    return {
        # an open critical incident is listed: exit 1 at the default --fail-on error
        ("incidents", "--json"): (EXIT_FINDINGS, audit.restart_incident),
        ("repair", "--incident", audit.restart_incident): (EXIT_OK, "step 1: replay"),
        ("forensics", "--job", audit.job, "--at", audit.moment.isoformat()): (EXIT_OK, "RESTART_SKIP"),
        ("config", "show"): (EXIT_OK, '"data_dir"'),
        ("report", "--output", str(out / "report.html")): (EXIT_OK, "report written to"),
    }


def no_java_env(home: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `java` (JAVA_HOME's and PATH's) records its arguments and fails."""
    calls = home / "java-calls.log"
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f'#!/bin/sh\necho "java $*" >> "{calls}"\nexit 1\n')
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(JAVA_HOME=str(home), PATH=os.pathsep.join([str(java.parent), env.get("PATH", "")]))
    return env, calls


@pytest.fixture(scope="module")
def probe(audit: AuditTables, tmp_path_factory: pytest.TempPathFactory) -> Probe:
    """One process: the parser built, then every interactive command and every `--help`."""
    work = tmp_path_factory.mktemp("probe")
    env, calls = no_java_env(work / "no-java")
    data = ["--set", f"paths.data_dir={audit.data_dir}"]
    expected = interactive(audit, work)
    lines = [[*argv, *data] for argv in expected] + [[*argv, "--help"] for argv in HELPS]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(lines)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    runs = {tuple(a for a in run["argv"] if a not in data): run for run in result["runs"]}
    return Probe(result["engines"], expected, runs, calls.read_text() if calls.exists() else "")


def test_the_interactive_commands_answer_from_the_tables_without_a_jvm(probe: Probe) -> None:
    for argv, (code, shown) in probe.expected.items():
        run = probe.runs[argv]
        assert (run["code"], shown in run["stdout"]) == (code, True), run
    assert probe.java_calls == ""


def test_every_help_starts_no_jvm(probe: Probe) -> None:
    helps = [probe.runs[(*argv, "--help")] for argv in HELPS]
    assert [run["code"] for run in helps] == [0] * len(HELPS)
    assert probe.java_calls == ""


@pytest.mark.parametrize("argv", HELPS, ids=lambda argv: " ".join(argv) or "offset-audit")
def test_every_help_prints_its_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: offset-audit")


def test_building_the_parser_imports_no_engine(probe: Probe) -> None:
    assert probe.engines == []
