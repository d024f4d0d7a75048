"""Pure pieces of the Flink test harness: which Java sources each stack compiles, and the cache key
that decides when they are compiled again; and that every named JVM classpath has its pom."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.runtime import jvm
from tests.flink import harness

pytestmark = pytest.mark.unit


def test_every_named_classpath_has_its_pom() -> None:
    assert {"flink-1.20", "flink-2.2"} <= set(jvm.CLASSPATH_NAMES)
    for name in jvm.CLASSPATH_NAMES:
        assert jvm.pom_path(name).is_file(), name


def test_the_legacy_consumer_is_compiled_on_the_1_20_stack_only() -> None:
    # Flink 2 removed SourceFunction: the legacy FlinkKafkaConsumer does not compile there
    names = {stack: {p.name for p in harness.java_sources(stack)} for stack in harness.STACKS}
    assert "LegacyKafka.java" in names["1.20"]
    assert "LegacyKafka.java" not in names["2.2"]
    assert {"FlinkKafkaJob.java", "StateOracle.java"} <= names["2.2"]


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
