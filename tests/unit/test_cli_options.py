"""The options every command takes work before the command's name and after it alike."""

from __future__ import annotations

import json

import pytest

from app import cli
from tests.support.config import build_config

pytestmark = pytest.mark.unit

PARSER = cli.build_parser()


def parsed(*argv: str) -> dict[str, object]:
    args = cli.parse_arguments(PARSER, list(argv))
    return {k: getattr(args, k) for k in ("env", "conf_dir", "overrides", "json", "log_level")}


@pytest.mark.parametrize(
    ("option", "command"),
    [
        (["--log-level", "DEBUG"], ["reconcile"]),
        (["--json"], ["incidents"]),
        (["--env", "prod"], ["check"]),
        (["--conf-dir", "/etc/oa"], ["report"]),
        (["--set", "log_level=ERROR"], ["config", "show"]),
    ],
)
def test_a_common_option_before_the_command_is_not_overwritten_by_its_default(
    option: list[str], command: list[str]
) -> None:
    given_before, given_after = parsed(*option, *command), parsed(*command, *option)
    assert given_before == given_after != parsed(*command)


def test_without_common_options_the_defaults_hold() -> None:
    assert parsed("forensics") == {
        "env": "local",
        "conf_dir": None,
        "overrides": [],
        "json": False,
        "log_level": None,
    }


def test_the_option_given_after_the_command_wins_and_settings_add_up() -> None:
    assert parsed("--env", "a", "--set", "x=1", "incidents", "--env", "b", "--set", "y=2") == {
        "env": "b",
        "conf_dir": None,
        "overrides": ["x=1", "y=2"],
        "json": False,
        "log_level": None,
    }


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["demo"], "WARNING"),  # the demo narrates: its logs show only warnings unless asked
        (["--log-level", "DEBUG", "demo"], "DEBUG"),
        (["demo", "--log-level", "INFO"], "INFO"),
        (["reconcile"], "INFO"),  # the config's log_level
        (["--log-level", "ERROR", "reconcile"], "ERROR"),
    ],
)
def test_log_level_is_the_option_else_the_commands_default_else_the_configs(
    argv: list[str], level: str
) -> None:
    cfg = build_config()
    assert cli.log_level(cli.parse_arguments(PARSER, argv), cfg) == level


def test_json_before_the_command_reaches_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--json", "--set", "log_level=ERROR", "config", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)  # one line of JSON, not the indented text
    assert shown["log_level"] == "ERROR"
