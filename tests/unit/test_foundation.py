"""Pure pieces of the foundation: jar naming, classpath caching, broker and Spark settings, CLI codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.config import SparkConfig
from app.demo.local_kafka import new_cluster_id, server_properties
from app.runtime import jvm
from app.runtime.spark import local_conf, running_under_spark_submit
from tests.support.config import set_options

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("jackson-core-2.13.5.jar", "jackson-core"),
        ("delta-spark_4.1_2.13-4.4.0.jar", "delta-spark_4.1_2.13"),
        ("spark-token-provider-kafka-0-10_2.13-4.1.0-preview1.jar", "spark-token-provider-kafka-0-10_2.13"),
        ("log4j-slf4j2-impl-2.24.3.jar", "log4j-slf4j2-impl"),
        ("spark-sql-kafka-0-10_2.13-4.1.3.jar", "spark-sql-kafka-0-10_2.13"),
        ("RoaringBitmap-1.3.0.jar", "RoaringBitmap"),
    ],
)
def test_artifact_name_strips_the_version(jar: str, artifact: str) -> None:
    assert jvm.artifact_name(Path(jar)) == artifact


def test_spark_extra_jars_drop_what_pyspark_ships(tmp_path: Path) -> None:
    provided = tmp_path / "provided"
    provided.mkdir()
    (provided / "jackson-core-2.21.2.jar").touch()
    jars = [tmp_path / "delta-spark_4.1_2.13-4.4.0.jar", tmp_path / "jackson-core-2.13.5.jar"]
    for j in jars:
        j.touch()
    cache = tmp_path / "cache"
    cp = jvm.classpath_file("spark", cache)
    cp.parent.mkdir(parents=True)
    cp.write_text(":".join(map(str, jars)))
    assert jvm.spark_extra_jars(cache, provided) == [jars[0]]


def test_cached_classpath_is_used_without_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = tmp_path / "a-1.0.jar"
    jar.touch()
    cp = jvm.classpath_file("kafka", tmp_path)
    cp.parent.mkdir(parents=True)
    cp.write_text(str(jar))
    monkeypatch.setattr(jvm, "_run_maven", lambda *_: pytest.fail("Maven must not run on a warm cache"))
    assert jvm.resolve_classpath("kafka", tmp_path) == [jar]


def test_classpath_cache_key_follows_the_pom(tmp_path: Path) -> None:
    assert jvm.classpath_file("spark", tmp_path) != jvm.classpath_file("kafka", tmp_path)
    assert jvm.classpath_file("spark", tmp_path).name.startswith("spark-")


def test_server_properties_bind_loopback_with_small_offsets_topic(tmp_path: Path) -> None:
    props = dict(
        line.split("=", 1) for line in server_properties(tmp_path, 9001, 9002, 3).splitlines() if line
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9002"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["offsets.topic.num.partitions"] == "3"
    assert props["process.roles"] == "broker,controller"


def test_cluster_id_is_kafka_uuid_text() -> None:
    cid = new_cluster_id()
    assert len(cid) == 22
    assert "=" not in cid


def test_local_spark_conf_is_utc_delta_and_user_wins() -> None:
    conf = local_conf(SparkConfig(conf={"spark.sql.shuffle.partitions": "16"}), [Path("/j/a.jar")], "/wh")
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.extensions"].split(",")[0] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.jars"] == "/j/a.jar"
    assert conf["spark.sql.shuffle.partitions"] == "16"
    assert conf["spark.ui.enabled"] == "false"


def test_spark_submit_is_detected_by_its_gateway() -> None:
    assert running_under_spark_submit({"PYSPARK_GATEWAY_PORT": "4242"})
    assert not running_under_spark_submit({})


def test_usage_error_exits_2() -> None:
    assert main(["no-such-command"]) == 2


def test_kafka_local_status_without_broker_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["kafka-local", "status", *set_options(data_dir=tmp_path)])
    assert code == 3
    assert "not running" in capsys.readouterr().out


def test_a_cache_dir_given_with_a_tilde_resolves_under_home_and_hands_maven_an_absolute_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`paths.cache_dir` defaults to `~/.cache/offset-audit`: Maven, run with `-f pom`, would write a
    relative output file under the pom's directory, where nothing reads it back."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path / "..")
    jar = tmp_path / "a-1.0.jar"
    jar.touch()
    handed: list[Path] = []

    def fake_maven(name: str, out_file: Path) -> None:
        handed.append(out_file)
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(str(jar))

    monkeypatch.setattr(jvm, "_run_maven", fake_maven)
    assert jvm.resolve_classpath("kafka", Path("~/.cache/offset-audit")) == [jar]
    assert handed[0].is_absolute()
    assert handed[0].is_relative_to(tmp_path)
    assert jvm.classpath_file("kafka", tmp_path / ".cache" / "offset-audit").exists()
