"""Pure pieces of the Flink test harness: which Java sources each stack compiles, the cache key that
decides when they are compiled again and how a compile is put in place; and that every named JVM
classpath has its pom."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.runtime import jvm
from tests.flink import harness

pytestmark = pytest.mark.unit


def test_every_named_classpath_has_its_pom() -> None:
    assert {"flink-1.20", "flink-2.2", "flink-1.20-iceberg"} <= set(jvm.CLASSPATH_NAMES)
    for name in jvm.CLASSPATH_NAMES:
        assert jvm.pom_path(name).is_file(), name


def test_the_legacy_consumer_is_compiled_on_the_1_20_stack_only() -> None:
    # Flink 2 removed SourceFunction: the legacy FlinkKafkaConsumer does not compile there
    names = {stack: {p.name for p in harness.java_sources(stack)} for stack in harness.STACKS}
    assert "LegacyKafka.java" in names["1.20"]
    assert "LegacyKafka.java" not in names["2.2"]
    assert {"FlinkKafkaJob.java", "StateOracle.java"} <= names["2.2"]


def test_the_iceberg_sink_is_compiled_on_its_own_stack_only() -> None:
    # the other stacks' jobs neither compile against nor load Iceberg's jars
    names = {stack: {p.name for p in harness.java_sources(stack)} for stack in harness.SOURCE_DIRS}
    assert {"IcebergOut.java", "FlinkKafkaJob.java", "LegacyKafka.java"} <= names[harness.ICEBERG_STACK]
    assert all("IcebergOut.java" not in names[stack] for stack in harness.STACKS)
    assert all(name in jvm.CLASSPATH_NAMES for names in harness.CLASSPATHS.values() for name in names)


def test_a_joined_classpath_keeps_each_artifact_once_the_first_classpaths_copy() -> None:
    flink = [Path("/m2/flink-core-1.20.0.jar"), Path("/m2/commons-lang3-3.12.0.jar")]
    iceberg = [
        Path("/m2/iceberg-flink-runtime-1.20-1.11.0.jar"),
        Path("/m2/flink-core-1.20.0.jar"),
        Path("/m2/commons-lang3-3.17.0.jar"),
    ]
    assert harness.joined_classpath([flink, iceberg]) == (*flink, iceberg[0])


def test_the_classes_are_compiled_again_when_a_source_or_the_classpath_changes(tmp_path: Path) -> None:
    sources = [tmp_path / "src" / p.name for p in harness.java_sources("1.20")]
    sources[0].parent.mkdir()
    for copy, original in zip(sources, harness.java_sources("1.20"), strict=True):
        shutil.copy(original, copy)
    classpath = [Path("/m2/flink-core-1.20.0.jar"), Path("/m2/flink-connector-kafka-3.4.0-1.20.jar")]
    key = harness.classes_key(sources, classpath)

    assert harness.classes_key(sources, classpath) == key
    assert harness.classes_key(sources, [*classpath, Path("/m2/extra.jar")]) != key
    sources[0].write_text(sources[0].read_text() + "\n// changed\n")
    assert harness.classes_key(sources, classpath) != key


def compiled(path: Path, marker: str, complete: bool = True) -> Path:
    path.mkdir(parents=True)
    (path / "Job.class").write_text(marker)
    if complete:
        (path / ".complete").touch()
    return path


def test_a_finished_compile_is_moved_into_place_whole(tmp_path: Path) -> None:
    out = tmp_path / "1.20-key"
    harness.publish(compiled(tmp_path / "1.20-key.tmp1", "mine"), out)
    assert (out / "Job.class").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.20-key"]


def test_a_compile_another_session_put_in_place_first_is_kept_as_its_programs_may_run(
    tmp_path: Path,
) -> None:
    out = compiled(tmp_path / "1.20-key", "theirs")
    harness.publish(compiled(tmp_path / "1.20-key.tmp2", "mine"), out)
    assert (out / "Job.class").read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.20-key"]


def test_a_half_deleted_dir_in_place_is_replaced(tmp_path: Path) -> None:
    out = compiled(tmp_path / "1.20-key", "broken", complete=False)
    harness.publish(compiled(tmp_path / "1.20-key.tmp3", "mine"), out)
    assert (out / "Job.class").read_text() == "mine"
