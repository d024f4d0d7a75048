"""The group-commit settings `attach` takes (`kafka_options`, `commit_timeout_s`): errors name the
argument or key, never a value, since the values may be credentials."""

from __future__ import annotations

import re

import pytest

from app.errors import AttachError
from app.stream.attach import GroupSettings, check_commit_timeout, commit_client_conf, group_commits

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-pa55word"


def test_no_group_means_no_commit_client() -> None:
    assert commit_client_conf(None, None) is None


def test_the_options_reach_the_client_with_our_logger() -> None:
    conf = commit_client_conf("payments", {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL"})
    assert conf is not None
    assert conf["bootstrap.servers"] == "b:9092"
    assert conf["security.protocol"] == "SASL_SSL"
    assert "logger" in conf


@pytest.mark.parametrize(
    ("group_id", "options", "named"),
    [
        ("payments", None, "bootstrap.servers"),
        ("payments", {"sasl.password": SECRET}, "bootstrap.servers"),
        ("", {"bootstrap.servers": "b:9092"}, "group_id"),
        (None, {"bootstrap.servers": "b:9092"}, "group_id"),
        ("payments", {"bootstrap.servers": "b:9092", "group.id": "other"}, "group.id"),
    ],
)
def test_unusable_settings_name_the_key_and_never_a_value(
    group_id: str | None, options: dict[str, str] | None, named: str
) -> None:
    with pytest.raises(AttachError, match=re.escape(named)) as caught:
        commit_client_conf(group_id, options)
    assert SECRET not in str(caught.value)


def test_a_value_the_client_refuses_is_masked() -> None:
    conf = commit_client_conf("payments", {"bootstrap.servers": "b:9092", "security.protocol": SECRET})
    assert conf is not None
    with pytest.raises(AttachError, match=re.escape("security.protocol")) as caught:
        group_commits("payments", "run-1", "payments", conf)
    assert SECRET not in str(caught.value)


def test_no_group_means_no_committer_whatever_the_timeout() -> None:
    assert GroupSettings(None, None, 5.0).commits("payments", "run-1") is None


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), "30", True, None])
def test_a_commit_timeout_that_is_not_a_positive_number_is_refused(timeout: object) -> None:
    with pytest.raises(AttachError, match="commit_timeout_s"):
        check_commit_timeout(timeout)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0.5, 5, 30.0])
def test_a_positive_commit_timeout_is_taken(timeout: float) -> None:
    check_commit_timeout(timeout)
