"""Remedies on the real broker, Spark and Delta: a gap is replayed from Kafka into the sink, a
second writer's copies are deleted and a reset tool's group offsets are set back, each once (a second
run changes nothing and writes nowhere: neither the sink nor the incidents table gets a new Delta
version, nor the group a new commit); a reconcile of the same window then finds neither gap nor
duplicate, the incidents are resolved, and the printed undo restores the sink. A repaired incident
is history a later reconcile carries over as written. A sink that is not the reference job's
raw-record sink gets the plan only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app import cli
from app.config import AppConfig, KafkaConfig
from app.incidents.io import read_incidents
from app.kafka.clients import plain_conf, spark_kafka_options
from app.kafka.gaps import kafka_gap_confirmer
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from app.stream.startup import to_sink_rows
from tests.support.config import build_config, set_options
from tests.support.ledger_data import GROUP, at, checkpoint, commits_table, ev, gc, ledger_table, with_topic
from tests.support.reconcile import read, reconcile, save
from tests.support.streaming import create_topic, deliver, group_offsets

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

RECORDS = 40


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_repairs_replay_gaps_and_delete_second_copies_once_and_can_be_undone(
    spark: SparkSession,
    tmp_path: Path,
    bootstrap: str,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = f"repair-{unique}"
    create_topic(bootstrap, topic, 1)
    producer = Producer(plain_conf(bootstrap))
    for i in range(RECORDS):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
    deliver(producer)

    cfg = build_config(data_dir=tmp_path)
    save(
        with_topic(
            ledger_table(
                ev("RUN_STARTED", 0),
                ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
                checkpoint(1, 10, {0: RECORDS}),
                ev("RUN_STOPPED", 30),
            ),
            topic,
        ),
        cfg,
        "ledger",
    )
    # The job's own commit, then a reset tool moving the group back to 5 after the job stopped.
    save(commits_table(gc(12, 0, RECORDS, topic=topic), gc(40, 0, 5, topic=topic)), cfg, "group_commits")
    source = (
        spark.read.format("kafka")
        .options(**spark_kafka_options(KafkaConfig(bootstrap_servers=bootstrap), bootstrap))
        .option("subscribe", topic)
        .load()
    )
    written = to_sink_rows(source, 1, "run-1")
    sink_path = tables_from_config(cfg).sink
    written.where(~F.col("kafka_offset").between(10, 19)).write.format("delta").save(sink_path)
    second = written.where(F.col("kafka_offset").between(30, 34)).withColumn(
        "_run_id", F.lit("second-writer")
    )
    second.write.format("delta").mode("append").save(sink_path)

    confirm = kafka_gap_confirmer(
        KafkaConfig(bootstrap_servers=bootstrap), bootstrap, max_records=100, timeout_s=60
    )
    found = reconcile(spark, cfg, "rec-1", confirmer=confirm)
    by_kind = {i.kind: i for i in found.incidents}
    assert {
        k: (i.severity, i.impact.records_lost, i.impact.records_duplicated) for k, i in by_kind.items()
    } == {
        "gap": ("critical", 10, 0),
        "second_writer": ("error", 0, 5),
        "external_offset_change": ("error", 0, 0),
    }
    common = set_options(f"kafka.bootstrap_servers={bootstrap}", data_dir=tmp_path)

    gap_id = by_kind["gap"].incident_id
    code, plan = cli_json(capsys, "repair", "--incident", gap_id, *common)
    assert (code, plan["dry_run"]) == (0, True)
    assert read(spark, cfg, "sink").count() == RECORDS - 10 + 5  # a dry run changes nothing

    code, done = cli_json(capsys, "repair", "--incident", gap_id, "--execute", *common)
    assert (code, done["incident_updated"]) == (0, True)
    assert done["actions"][0]["records_appended"] == 10
    version = done["actions"][0]["version_after"]
    stored = versions(cfg)
    code, again = cli_json(capsys, "repair", "--incident", gap_id, "--execute", *common)
    assert (again["actions"][0]["records_appended"], again["actions"][0]["version_after"]) == (0, version)
    assert (versions(cfg), again["incident_updated"]) == (stored, False)  # the repeat wrote nowhere
    replayed = read(spark, cfg, "sink").where(F.col("kafka_offset").between(10, 19))
    assert sorted((r.kafka_offset, r.value) for r in replayed.collect()) == [
        (o, f"v{o}".encode()) for o in range(10, 20)
    ]

    dup_id = by_kind["second_writer"].incident_id
    before = sink_rows(spark, cfg)
    code, plan = cli_json(capsys, "repair", "--incident", dup_id, *common)
    (step,) = plan["plan"]["steps"]
    assert (code, step["action"]) == (0, "delete_duplicates")
    assert step["ranges"] == [{"topic": topic, "partition": 0, "start": 30, "end": 35}]
    assert sink_rows(spark, cfg) == before  # a dry run changes nothing
    code, removed = cli_json(capsys, "repair", "--incident", dup_id, "--execute", *common)
    deleted = removed["actions"][0]
    assert deleted["copies_deleted"] == 5
    assert deleted["version_after"] == deleted["version_before"] + 1  # one Delta commit
    sink = read(spark, cfg, "sink")
    assert sink.count() == len(before) - 5 == RECORDS
    assert sink.where(F.col("_run_id") == "second-writer").count() == 0  # the first writer's copies stay
    stored = versions(cfg)
    code, twice = cli_json(capsys, "repair", "--incident", dup_id, "--execute", *common)
    assert (versions(cfg), twice["incident_updated"]) == (stored, False)  # the repeat wrote nowhere
    again_deleted = twice["actions"][0]
    assert again_deleted["copies_deleted"] == 0
    assert again_deleted["version_before"] == again_deleted["version_after"] == deleted["version_after"]
    assert twice["undo"] == []

    # The reset tool's offsets: the plan sets the group back to the last completed checkpoint, and
    # executing it does so through the Admin API (the group has no members), twice to the same end.
    reset_id = by_kind["external_offset_change"].incident_id
    code, plan = cli_json(capsys, "repair", "--incident", reset_id, *common)
    assert (code, plan["plan"]["steps"][0]["offsets"]) == (
        0,
        [{"topic": topic, "partition": 0, "offset": RECORDS}],
    )
    for first in (True, False):
        stored = versions(cfg)
        code, reset = cli_json(capsys, "repair", "--incident", reset_id, "--execute", *common)
        assert (code, reset["actions"][0]["action"], reset["undo"]) == (0, "reset_offsets", [])
        assert group_offsets(bootstrap, GROUP, topic, 1) == {0: RECORDS}
        # The repeat finds the group where the plan puts it: no commit, no new incidents version.
        wrote = (reset["actions"][0]["offsets_changed"], reset["incident_updated"], versions(cfg) != stored)
        assert wrote == ((1, True, True) if first else (0, False, False))

    # The same window reconciled again: nothing lost or duplicated, both incidents resolved.
    after = reconcile(spark, cfg, "rec-2", confirmer=confirm, since=at(-3600))
    assert {t for t, _ in after.counts} & {"GAP", "DUPLICATE"} == set()
    statuses = {r.incident_id: r.status for r in read(spark, cfg, "incidents").collect()}
    assert (statuses[gap_id], statuses[dup_id]) == ("resolved", "resolved")

    # The printed undo brings the sink back as it was before the copies were deleted.
    spark.sql(removed["undo"][0])
    assert sink_rows(spark, cfg) == before

    # A sink without the raw records (no key, no value) cannot be repaired from Kafka: plan only.
    narrow = str(tmp_path / "narrow-sink")
    read(spark, cfg, "sink").select("kafka_topic", "kafka_partition", "kafka_offset").write.format(
        "delta"
    ).save(narrow)
    code = cli.main(
        ["repair", "--incident", gap_id, "--execute", *common, *set_options(f"tables.sink={narrow}")]
    )
    assert code == 2
    assert "only the plan can be produced" in capsys.readouterr().err
    assert spark.read.format("delta").load(narrow).count() == RECORDS + 5


def test_a_repaired_restart_stays_as_it_was_written_and_fails_no_later_run(
    spark: SparkSession,
    tmp_path: Path,
    bootstrap: str,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A restart from 'latest' skipped [20, 30): its incident is critical with 10 records lost. After
    the repair replayed them, a whole-history reconcile finds the restart's RESTART_SKIP again (the
    ledger keeps it) but no gap: the resolved incident is history, carried over as written (impact,
    severity, cause, the remedy with its execution record and undo), and `--fail-on critical`
    exits 0, since the findings of a resolved incident fail no run."""
    topic = f"repaired-{unique}"
    create_topic(bootstrap, topic, 1)
    producer = Producer(plain_conf(bootstrap))
    for i in range(RECORDS):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
    deliver(producer)

    cfg = build_config(data_dir=tmp_path)
    save(
        with_topic(
            ledger_table(
                ev("RUN_STARTED", 0),
                ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
                checkpoint(1, 10, {0: 20}),
                ev("RUN_STOPPED", 30),
                ev("RUN_STARTED", 100, run="run-2"),
                ev("OFFSETS_RESTORED", 100, run="run-2", offsets={0: 30}, detail={"source": "latest"}),
                checkpoint(2, 110, {0: RECORDS}, run="run-2"),
                ev("RUN_STOPPED", 120, run="run-2"),
            ),
            topic,
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(12, 0, 20, topic=topic), gc(112, 0, RECORDS, topic=topic)), cfg, "group_commits")
    source = (
        spark.read.format("kafka")
        .options(**spark_kafka_options(KafkaConfig(bootstrap_servers=bootstrap), bootstrap))
        .option("subscribe", topic)
        .load()
    )
    to_sink_rows(source, 1, "run-1").where(~F.col("kafka_offset").between(20, 29)).write.format("delta").save(
        tables_from_config(cfg).sink
    )
    confirm = kafka_gap_confirmer(
        KafkaConfig(bootstrap_servers=bootstrap), bootstrap, max_records=100, timeout_s=60
    )
    (restart,) = reconcile(spark, cfg, "rec-1", confirmer=confirm).incidents
    assert (restart.kind, restart.severity, restart.impact.records_lost) == ("restart", "critical", 10)

    common = set_options(f"kafka.bootstrap_servers={bootstrap}", data_dir=tmp_path)
    code, done = cli_json(capsys, "repair", "--incident", restart.incident_id, "--execute", *common)
    assert (code, done["actions"][0]["records_appended"]) == (0, 10)
    (repaired,) = [
        i
        for i in read_incidents(AuditTables.from_config(cfg, spark).incidents)
        if i.incident_id == restart.incident_id
    ]
    assert repaired.status == "resolved"
    assert repaired.remedy.executed is not None

    # The whole history again, as a scheduler gating on critical runs it.
    history = ["--since", at(-3600).isoformat(), "--until", at(10_000).isoformat()]
    code, again = cli_json(capsys, "reconcile", *history, "--fail-on", "critical", *common)
    findings = {(f["finding_type"], f["severity"]): f for f in again["findings"]}
    assert ("GAP", "critical") not in findings  # the replay holds
    assert ("RESTART_SKIP", "critical") in findings  # the ledger keeps the restart for good
    (after,) = [
        i
        for i in read_incidents(AuditTables.from_config(cfg, spark).incidents)
        if i.incident_id == restart.incident_id
    ]
    assert (after.impact.records_lost, after.severity) == (10, "critical")
    assert after.to_row() == repaired.to_row()  # impact, severity, cause, remedy, execution, undo
    assert (again["failing_findings"], code) == (0, 0)
    assert findings[("RESTART_SKIP", "critical")]["of_resolved_incidents"] == 1


def versions(cfg: AppConfig) -> tuple[int, int]:
    """The Delta versions of the incidents table and of the sink."""
    incidents, sink = (
        DeltaTable(tables_from_config(cfg).named(name)).version() for name in ("incidents", "sink")
    )
    return incidents, sink


def sink_rows(spark: SparkSession, cfg: AppConfig) -> list[tuple[Any, ...]]:
    """Every sink row, with its writer, in a stable order."""
    columns = ("kafka_topic", "kafka_partition", "kafka_offset", "_run_id", "_checkpoint_id", "value")
    return sorted(tuple(r) for r in read(spark, cfg, "sink").select(*columns).collect())


def test_offsets_are_reset_only_while_the_group_has_no_active_member(
    tmp_path: Path, bootstrap: str, unique: str
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    from app.errors import UsageError
    from app.incidents.remedy import PartitionOffset
    from app.incidents.repair import reset_offsets

    topic, group = f"reset-{unique}", f"grp-{unique}"
    create_topic(bootstrap, topic, 1)
    cfg = build_config(f"kafka.bootstrap_servers={bootstrap}", data_dir=tmp_path)

    reset_offsets(cfg, bootstrap, group, [PartitionOffset(topic, 0, 0)])
    assert group_offsets(bootstrap, group, topic, 1) == {0: 0}

    member = Consumer(plain_conf(bootstrap, **{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        member.subscribe([topic])
        deadline = 120
        while not member.assignment() and deadline > 0:  # joined once it holds an assignment
            member.poll(1.0)
            deadline -= 1
        assert member.assignment() == [TopicPartition(topic, 0)]
        with pytest.raises(UsageError, match="active member"):
            reset_offsets(cfg, bootstrap, group, [PartitionOffset(topic, 0, 0)])
    finally:
        member.close()
