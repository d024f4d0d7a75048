"""What a person types in an incident answers without starting Spark: `incidents`, a repair plan,
`forensics --at` and the dashboard read the tables on the driver through delta-rs; they, `config
show` and every `--help` start no JVM.

Each runs as its own process with `java` replaced by a stand-in that records any call and fails:
a command that tried to start Spark (or any JVM) leaves a record and fails, whatever the timing.

Building the parser imports none of the engines (pyspark, pyarrow, delta-rs, Kafka's client): a
`--help` costs the interpreter's start and the config module only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import cli
from app.commands.outcome import EXIT_FINDINGS, EXIT_OK
from app.runtime.jvm import REPO_ROOT
from tests.audit_tables import AuditTables, write_audit_tables

pytestmark = pytest.mark.unit

COMMAND_TIMEOUT_S = 120  # a deadline for a hung process, not a speed check


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> AuditTables:
    return write_audit_tables(tmp_path_factory.mktemp("interactive") / "data")


@pytest.fixture
def no_java(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `java` (JAVA_HOME's and PATH's) records its arguments and fails."""
    home = tmp_path / "no-java"
    calls = home / "java-calls.log"
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f'#!/bin/sh\necho "java $*" >> "{calls}"\nexit 1\n')
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(JAVA_HOME=str(home), PATH=os.pathsep.join([str(java.parent), env.get("PATH", "")]))
    return env, calls


def run_cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def test_the_interactive_commands_answer_from_the_tables_without_a_jvm(
    audit: AuditTables, no_java: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, java_calls = no_java
    data = ["--set", f"paths.data_dir={audit.data_dir}"]
    expected = {
        # an open critical incident is listed: exit 1 at the default --fail-on error
        ("incidents", "--json"): (EXIT_FINDINGS, audit.restart_incident),
        ("repair", "--incident", audit.restart_incident): (EXIT_OK, "step 1: replay"),
        ("forensics", "--job", audit.job, "--at", audit.moment.isoformat()): (
            EXIT_OK,
            "RESTART_SKIP",
        ),
        ("config", "show"): (EXIT_OK, '"data_dir"'),
        ("report", "--output", str(tmp_path / "report.html")): (EXIT_OK, "report written to"),
    }
    for argv, (code, shown) in expected.items():
        done = run_cli(env, *argv, *data)
        assert (done.returncode, shown in done.stdout) == (code, True), (argv, done.stdout, done.stderr)
    assert not java_calls.exists(), java_calls.read_text()


def test_every_help_answers_without_a_jvm(no_java: tuple[dict[str, str], Path]) -> None:
    env, java_calls = no_java
    commands = ["config", "setup-jvm", "kafka-local", *cli.COMMANDS]
    for argv in ([], *([c] for c in commands)):
        done = run_cli(env, *argv, "--help")
        assert (done.returncode, done.stdout.startswith("usage: offset-audit")) == (0, True), argv
    assert not java_calls.exists(), java_calls.read_text()


# What the commands' work needs and a parser does not (their imports were two thirds of `--help`'s time).
ENGINES = ("pyspark", "py4j", "pyarrow", "deltalake", "confluent_kafka", "duckdb", "great_expectations")


def test_building_the_parser_imports_no_engine() -> None:
    probe = (
        "import json, sys\n"
        "from app import cli\n"
        "cli.build_parser()\n"
        f"print(json.dumps([m for m in {ENGINES!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert (done.returncode, json.loads(done.stdout)) == (0, []), done.stderr
