"""Where `ingest-offsets` reads and decodes is decided in one place: on the driver when Spark runs
local, on the executors otherwise, unless config `ingest.decode_on` forces a path."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import IngestConfig, load_config
from app.errors import ConfigError, OffsetAuditError
from app.routes import DRIVER, SPARK, decode_route

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]", "local[4,3]", " local[*] "])
def test_auto_decodes_on_the_driver_when_spark_runs_local(master: str) -> None:
    assert decode_route("auto", master) == DRIVER


@pytest.mark.parametrize(
    "master",
    ["spark://10.0.0.1:7077", "yarn", "k8s://https://api:6443", "local-cluster[2,1,1024]", "mesos://m:5050"],
)
def test_auto_decodes_on_the_executors_on_a_cluster(master: str) -> None:
    assert decode_route("auto", master) == SPARK


@pytest.mark.parametrize("master", ["local[*]", "spark://10.0.0.1:7077"])
def test_a_forced_path_is_taken_whatever_the_master(master: str) -> None:
    assert decode_route("driver", master) == DRIVER
    assert decode_route("spark", master) == SPARK


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(OffsetAuditError, match=r"ingest\.decode_on"):
        decode_route("gpu", "local[*]")


def test_config_key_defaults_to_auto_and_is_validated_at_load(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("ingest:\n  groups: [g]\n")
    (tmp_path / "dev.yaml").write_text("")
    assert load_config("dev", conf_dir=tmp_path, environ={}).ingest.decode_on == "auto"
    forced = load_config("dev", ["ingest.decode_on=spark"], conf_dir=tmp_path, environ={})
    assert forced.ingest.decode_on == "spark"
    with pytest.raises(ConfigError, match=r"ingest\.decode_on"):
        load_config("dev", ["ingest.decode_on=executors"], conf_dir=tmp_path, environ={})
    with pytest.raises(ConfigError, match=r"ingest\.decode_on"):
        IngestConfig(decode_on="")
