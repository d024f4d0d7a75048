"""What a person types in an incident answers without starting Spark: `incidents`, a repair plan,
`forensics --at` and the dashboard read the tables on the driver through delta-rs; they, `config
show` and every `--help` start no JVM.

They all run in one fresh process with `java` replaced by a stand-in that records any call and
fails (tests/unit/no_jvm.py). The same process first builds the parser: that imports none of the
engines (pyspark, pyarrow, delta-rs, Kafka's client), so a `--help` costs the interpreter's start
and the config module only. What each `--help` prints is checked in this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from app import cli
from app.commands.outcome import EXIT_FINDINGS, EXIT_OK
from tests.support.audit_tables import AuditTables, write_audit_tables
from tests.support.config import set_options
from tests.unit.no_jvm import Probe, Run, run_without_java

pytestmark = pytest.mark.unit

HELPS = [[], *([c] for c in ["config", "setup-jvm", "kafka-local", *cli.COMMANDS])]


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


@dataclass(frozen=True)
class Answers:
    probe: Probe
    interactive: list[tuple[Run, int, str]]  # each interactive command's run, expected code and output


@pytest.fixture(scope="module")
def answers(audit: AuditTables, tmp_path_factory: pytest.TempPathFactory) -> Answers:
    """One process: every interactive command, then every `--help`."""
    work = tmp_path_factory.mktemp("probe")
    data = tuple(set_options(data_dir=audit.data_dir))
    expected = interactive(audit, work)
    found = run_without_java(
        work / "no-java", [*([*argv, *data] for argv in expected), *([*argv, "--help"] for argv in HELPS)]
    )
    runs = zip(found.runs, expected.values(), strict=False)  # the helps follow
    return Answers(found, [(run, code, shown) for run, (code, shown) in runs])


def test_the_interactive_commands_answer_from_the_tables_without_a_jvm(answers: Answers) -> None:
    for run, code, shown in answers.interactive:
        assert (run.code, shown in run.stdout, run.java_calls) == (code, True, ""), run


def test_every_help_starts_no_jvm(answers: Answers) -> None:
    helps = [run for run in answers.probe.runs if run.argv[-1:] == ("--help",)]
    assert [(run.code, run.java_calls) for run in helps] == [(0, "")] * len(HELPS)


@pytest.mark.parametrize("argv", HELPS, ids=lambda argv: " ".join(argv) or "offset-audit")
def test_every_help_prints_its_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: offset-audit")


def test_building_the_parser_imports_no_engine(answers: Answers) -> None:
    assert answers.probe.engines == []
