"""Config loading: layering, substitution, overrides, validation errors that name the key, redaction."""

from __future__ import annotations

import dataclasses
import json
import logging
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from app.config import (
    DEFAULT_CONF_DIR,
    REDACTED,
    AppConfig,
    build_dataclass,
    load_config,
    parse_override,
    redact,
)
from app.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(
        "spark:\n  shuffle_partitions: 4\nkafka:\n  bootstrap_servers: broker:9092\n  request_timeout_s: 30\n"
    )
    (tmp_path / "dev.yaml").write_text("spark:\n  shuffle_partitions: 8\n")
    return tmp_path


def test_env_layer_overrides_base(conf_dir: Path) -> None:
    cfg = load_config("dev", conf_dir=conf_dir, environ={})
    assert cfg.spark.shuffle_partitions == 8
    assert cfg.kafka.bootstrap_servers == "broker:9092"
    assert cfg.env == "dev"


def test_set_override_wins_over_env_layer(conf_dir: Path) -> None:
    cfg = load_config("dev", ["spark.shuffle_partitions=3"], conf_dir=conf_dir, environ={})
    assert cfg.spark.shuffle_partitions == 3


def test_unknown_env_names_the_available_ones(conf_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown environment 'prod'; available: dev") as err:
        load_config("prod", conf_dir=conf_dir, environ={})
    assert err.value.key == "env"


def test_bad_type_names_the_key(conf_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"'kafka.request_timeout_s': expected a number, got 'soon'"):
        load_config("dev", ["kafka.request_timeout_s=soon"], conf_dir=conf_dir, environ={})


def test_bool_is_not_accepted_as_integer(conf_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"'spark.shuffle_partitions': expected an integer"):
        load_config("dev", ["spark.shuffle_partitions=true"], conf_dir=conf_dir, environ={})


def test_unknown_key_is_rejected_with_its_path(conf_dir: Path) -> None:
    (conf_dir / "dev.yaml").write_text("spark:\n  shuffle_partitons: 8\n")  # the typo is the point
    with pytest.raises(ConfigError, match=r"'spark.shuffle_partitons': unknown key"):
        load_config("dev", conf_dir=conf_dir, environ={})


def test_missing_environment_variable_names_key_and_variable(conf_dir: Path) -> None:
    (conf_dir / "dev.yaml").write_text("kafka:\n  bootstrap_servers: ${KAFKA_BOOTSTRAP}\n")
    with pytest.raises(
        ConfigError, match=r"'kafka.bootstrap_servers': environment variable \$\{KAFKA_BOOTSTRAP\}"
    ):
        load_config("dev", conf_dir=conf_dir, environ={})


def test_environment_substitution_and_default(conf_dir: Path) -> None:
    (conf_dir / "dev.yaml").write_text(
        "kafka:\n  bootstrap_servers: ${KAFKA_BOOTSTRAP}\npaths:\n  data_dir: ${DATA:-/tmp/x}\n"
    )
    cfg = load_config("dev", conf_dir=conf_dir, environ={"KAFKA_BOOTSTRAP": "k1:9093"})
    assert cfg.kafka.bootstrap_servers == "k1:9093"
    assert cfg.paths.data_dir == "/tmp/x"


def test_validation_in_post_init_names_key(conf_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"'spark.shuffle_partitions': must be at least 1"):
        load_config("dev", ["spark.shuffle_partitions=0"], conf_dir=conf_dir, environ={})


def test_kafka_properties_pass_through_untouched(conf_dir: Path) -> None:
    cfg = load_config(
        "dev",
        ["kafka.client.security.protocol=SASL_SSL", "kafka.librdkafka.sasl.password=p@ss:word=1"],
        conf_dir=conf_dir,
        environ={},
    )
    assert cfg.kafka.client == {"security.protocol": "SASL_SSL"}
    assert cfg.kafka.librdkafka == {"sasl.password": "p@ss:word=1"}


def test_override_of_passthrough_keeps_dotted_property_name() -> None:
    assert parse_override("kafka.java.sasl.jaas.config=a b") == {
        "kafka": {"java": {"sasl.jaas.config": "a b"}}
    }


def test_override_without_equals_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"key\.path=value"):
        parse_override("spark.master")


def test_redact_hides_secret_values_at_any_depth() -> None:
    shown = redact({"kafka": {"librdkafka": {"sasl.password": "hunter2", "sasl.username": "me"}}})
    assert shown == {"kafka": {"librdkafka": {"sasl.password": REDACTED, "sasl.username": "me"}}}


SECRET = "s3cr3t-Value-42"


def test_secret_never_in_display_or_repr(conf_dir: Path) -> None:
    (conf_dir / "dev.yaml").write_text(
        "kafka:\n  java:\n    sasl.jaas.config: 'x required password=\"${PW}\";'\n"
        "  librdkafka:\n    sasl.password: ${PW}\n"
    )
    cfg = load_config("dev", conf_dir=conf_dir, environ={"PW": SECRET})
    assert cfg.kafka.librdkafka["sasl.password"] == SECRET  # the client still gets it
    assert SECRET not in json.dumps(cfg.to_display())
    assert SECRET not in repr(cfg)
    assert SECRET not in str(cfg.kafka)


def test_secret_never_printed_or_logged_by_the_cli(
    conf_dir: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (conf_dir / "dev.yaml").write_text("kafka:\n  librdkafka:\n    sasl.password: ${PW}\n")
    monkeypatch.setenv("PW", SECRET)
    with caplog.at_level(logging.DEBUG):
        code = main(["config", "show", "--env", "dev", "--conf-dir", str(conf_dir), "--log-level", "DEBUG"])
    out = capsys.readouterr()
    assert code == 0
    assert '"sasl.password": "***"' in out.out
    assert SECRET not in out.out + out.err + caplog.text
    assert "config:" in caplog.text  # the config was logged, redacted


def test_cli_config_error_exits_2_and_names_key(conf_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["config", "show", "--env", "dev", "--conf-dir", str(conf_dir), "--set", "spark.mode=remote"])
    assert code == 2
    assert "spark.mode" in capsys.readouterr().err


def test_cli_unknown_env_exits_2(conf_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--env", "nope", "--conf-dir", str(conf_dir)]) == 2
    assert "unknown environment 'nope'" in capsys.readouterr().err


def test_repo_config_files_load() -> None:
    """The shipped conf/ layers are valid (cluster needs its secrets from the environment)."""
    assert load_config("local", environ={}).kafka.is_local
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "b:9092", "KAFKA_USERNAME": "u", "KAFKA_PASSWORD": SECRET,
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": SECRET + "-s3",
    }  # fmt: skip
    cluster = load_config("cluster", environ=env)
    assert cluster.spark.mode == "cluster"
    assert cluster.storage.options["fs.s3a.secret.key"] == SECRET + "-s3"
    assert SECRET not in json.dumps(cluster.to_display())
    # The first unset variable is named, with the key that needs it.
    with pytest.raises(ConfigError, match=r"storage\.options\.fs\.s3a\.access\.key.*AWS_ACCESS_KEY_ID"):
        load_config("cluster", environ={})
    with pytest.raises(ConfigError, match="KAFKA_BOOTSTRAP_SERVERS"):
        load_config("cluster", environ={k: v for k, v in env.items() if k != "KAFKA_BOOTSTRAP_SERVERS"})


def _sections() -> list[tuple[str, type[Any]]]:
    """(key, dataclass) of every section of AppConfig."""
    hints = typing.get_type_hints(AppConfig)
    return [(name, t) for name, t in hints.items() if dataclasses.is_dataclass(t) and isinstance(t, type)]


def _default(f: dataclasses.Field[Any]) -> Any:
    """A field's default as the loader would read it back from YAML (a Path with ~ expanded)."""
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return value.expanduser() if isinstance(value, Path) else value


def test_base_yaml_holds_every_key_with_its_default() -> None:
    """README: conf/base.yaml holds every key with its default. A key added to a dataclass but not
    to base.yaml (or commented out there), or a default that differs between the two, fails here."""
    base = yaml.safe_load((DEFAULT_CONF_DIR / "base.yaml").read_text())
    loaded = build_dataclass(AppConfig, {**base, "env": "base"}, "")
    sections = dict(_sections())
    assert set(base) == {f.name for f in dataclasses.fields(AppConfig)} - {"env"}
    for name, section in sections.items():
        assert set(base[name] or {}) == {f.name for f in dataclasses.fields(section)}, f"keys of {name}"
        for f in dataclasses.fields(section):
            assert getattr(getattr(loaded, name), f.name) == _default(f), f"{name}.{f.name}"
    top = [f for f in dataclasses.fields(AppConfig) if f.name not in sections and f.name != "env"]
    assert {f.name: getattr(loaded, f.name) for f in top} == {f.name: _default(f) for f in top}


def test_sink_mode_per_job_wins_over_the_default(conf_dir: Path) -> None:
    cfg = load_config(
        "dev",
        ["reconcile.sink_mode=none", "reconcile.sink_mode_by_job.pay.v2=delta_batches"],
        conf_dir=conf_dir,
        environ={},
    )
    assert cfg.reconcile.sink_mode_for("pay.v2") == "delta_batches"  # a dotted job name stays whole
    assert cfg.reconcile.sink_mode_for("orders") == "none"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("reconcile.sink_mode=rows", "reconcile.sink_mode"),
        ("reconcile.sink_mode_by_job.pay=delta", "reconcile.sink_mode_by_job.pay"),
        ("reconcile.sink_app_id_by_job.pay=", "reconcile.sink_app_id_by_job.pay"),
    ],
)
def test_unknown_sink_mode_exits_2_naming_its_key(
    conf_dir: Path, capsys: pytest.CaptureFixture[str], override: str, key: str
) -> None:
    code = main(["config", "show", "--env", "dev", "--conf-dir", str(conf_dir), "--set", override])
    assert code == 2
    assert f"'{key}'" in capsys.readouterr().err
