"""Exit codes for schedulers: no failure ever exits 1 (which means findings), and bad options exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from py4j.protocol import Py4JNetworkError
from pyspark.errors import PySparkRuntimeError

from app import cli
from app.errors import (
    ConfigError,
    KafkaUnavailableError,
    SchemaMismatchError,
    describe_error,
    error_kind,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (KafkaUnavailableError("down"), "infrastructure"),
        (Py4JNetworkError("gateway gone"), "infrastructure"),
        (PySparkRuntimeError(errorClass="SESSION_NOT_SAME", messageParameters={}), "infrastructure"),
        (PermissionError("no access to s3a://bucket"), "infrastructure"),
        (ConfigError("tables.sink", "no table"), "usage"),
        (SchemaMismatchError("sink lacks kafka_offset"), "usage"),
        (KeyError("a bug"), "internal"),
    ],
)
def test_errors_are_classified_for_the_exit_code(exc: BaseException, kind: str) -> None:
    assert error_kind(exc) == kind


def test_an_error_is_described_in_one_bounded_line() -> None:
    java = RuntimeError("org.apache.spark.SparkException: boom\n\tat a.b.C(C.java:1)\n" + "\tat x\n" * 1000)
    assert describe_error(java) == "RuntimeError: org.apache.spark.SparkException: boom"
    assert len(describe_error(RuntimeError("x" * 5000))) == 500


@pytest.mark.parametrize(
    ("raised", "code", "label"),
    [
        (Py4JNetworkError("Answer from Java side is empty"), 3, "infrastructure error"),
        (OSError("disk full"), 3, "infrastructure error"),
        (ZeroDivisionError("a bug"), 3, "internal error"),
    ],
)
def test_failures_outside_the_error_family_exit_3_not_1(
    raised: Exception,
    code: int,
    label: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def failing(args: object, cfg: object) -> int:
        raise raised

    monkeypatch.setattr(cli, "cmd_config_show", failing)
    assert cli.main(["config", "show", "--set", f"paths.data_dir={tmp_path}"]) == code
    err = capsys.readouterr().err
    assert err.startswith(f"offset-audit: {label}: ")
    assert "Traceback" not in err


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "show", "--log-level", "LOUD"]) == 2
    assert "--log-level" in capsys.readouterr().err
    assert cli.main(["config", "show", "--set", "log_level=LOUD"]) == 2
    assert "log_level" in capsys.readouterr().err
    assert cli.main(["config", "show", "--log-level", "debug"]) == 0


def test_a_reader_that_closed_the_output_ends_quietly_with_the_sigpipe_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`offset-audit incidents | head`: the reader leaving is not an infrastructure error (3)."""

    def writing_to_a_closed_pipe(args: object, cfg: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_config_show", writing_to_a_closed_pipe)
    assert cli.main(["config", "show"]) == 141
    assert capsys.readouterr().err == ""
