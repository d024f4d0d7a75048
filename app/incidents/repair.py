"""Executing an incident's remedy plan (app.incidents.grouping builds the plan; `repair --execute` runs it).

Only the reference job's raw-record sink (app.contracts.tables.SINK_SCHEMA: coordinates, key, value) can be
repaired, Delta or Iceberg alike (through the sink's handle, `storage.handles`): its rows are exactly
the source records, so a gap is closed by reading the records back from Kafka, and a duplicate by
dropping the extra copies. Any other sink gets the plan only, and so does an Iceberg sink addressed
by path (SQL writes an Iceberg table through its catalog); a job judged by another sink mode than
``coordinates`` is refused before anything runs.

- replay: the ranges are read from Kafka with Spark (read_committed) and appended to the sink in
  one commit (a Delta commit, an Iceberg snapshot) whose transaction id is derived from the
  incident, so running it again writes nothing; offsets the sink already holds are left out.
- delete_duplicates: the copies in the ranges are rewritten in one commit keeping one copy per
  offset, the first writer's (the oldest data file: Delta's file time, Iceberg's data sequence
  number); the table version before it is the undo (Delta's RESTORE, Iceberg's
  rollback_to_snapshot).
- reset_offsets: the group's offsets are set through the Admin API, only while the group has no
  active members (a running consumer would overwrite them, or be confused by them), and only when
  they differ from the plan's: a rerun commits nothing.

Whether a run changed anything (``RepairOutcome.changed``) decides whether the incident is written
again: a second ``--execute`` of a repaired incident writes nowhere. The steps and their results
are the typed ones of app.incidents.remedy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from app.config import AppConfig
from app.contracts.tables import SINK_SCHEMA
from app.contracts.vocabulary import SINK_COORDINATES
from app.errors import UsageError
from app.incidents.incident import StoredIncident
from app.incidents.remedy import (
    DeleteDuplicatesStep,
    DuplicatesDeleted,
    OffsetRange,
    OffsetsReset,
    PartitionOffset,
    RepairOutcome,
    Replayed,
    ReplayStep,
    ResetOffsetsStep,
    SinkCommitted,
    StepResult,
)
from app.kafka.clients import spark_kafka_options
from app.storage.handles import FORMAT_NAMES, TableHandle

log = logging.getLogger(__name__)

REPAIR_RUN_PREFIX: Final = "repair-"


def is_reference_sink(columns: Sequence[str]) -> bool:
    """The reference job's raw-record sink: every column of SINK_SCHEMA, nothing else needed."""
    return set(SINK_SCHEMA.fieldNames()) <= set(columns)


def _in_ranges(ranges: Sequence[OffsetRange]) -> Column:
    condition: Column = reduce(
        Column.__or__,
        [
            (F.col("kafka_topic") == r.topic)
            & (F.col("kafka_partition") == r.partition)
            & (F.col("kafka_offset") >= r.start)
            & (F.col("kafka_offset") < r.end)
            for r in ranges
        ],
    )
    return condition


def _predicate(ranges: Sequence[OffsetRange]) -> str:
    """The same condition as SQL text, for replaceWhere."""

    def quoted(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    return " OR ".join(
        f"(kafka_topic = {quoted(r.topic)} AND kafka_partition = {int(r.partition)}"
        f" AND kafka_offset >= {int(r.start)} AND kafka_offset < {int(r.end)})"
        for r in ranges
    )


def read_ranges(
    spark: SparkSession, cfg: AppConfig, bootstrap: str, ranges: Sequence[OffsetRange]
) -> DataFrame:
    """The source records of ``ranges`` as a batch read of Spark's Kafka source."""
    frames = []
    for r in ranges:
        topic, partition = r.topic, r.partition
        frames.append(
            spark.read.format("kafka")
            .options(**spark_kafka_options(cfg.kafka, bootstrap))
            .option("assign", json.dumps({topic: [partition]}))
            .option("startingOffsets", json.dumps({topic: {str(partition): r.start}}))
            .option("endingOffsets", json.dumps({topic: {str(partition): r.end}}))
            .option("kafka.isolation.level", "read_committed")
            .option("failOnDataLoss", "false")
            .load()
        )
    return reduce(DataFrame.unionByName, frames)


def replay(
    spark: SparkSession,
    cfg: AppConfig,
    sink_table: TableHandle,
    bootstrap: str,
    incident_id: str,
    ranges: Sequence[OffsetRange],
) -> Replayed:
    """Append the ranges' records the sink lacks, in one idempotent commit."""
    sink = sink_table.load()
    present = sink.where(_in_ranges(ranges)).select("kafka_topic", "kafka_partition", "kafka_offset")
    records = read_ranges(spark, cfg, bootstrap, ranges).select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.lit(None).cast("long").alias("_checkpoint_id"),
        F.lit(REPAIR_RUN_PREFIX + incident_id).alias("_run_id"),
        F.col("key"),
        F.col("value"),
    )
    missing = records.join(present, on=["kafka_topic", "kafka_partition", "kafka_offset"], how="left_anti")
    rows = missing.select(*[F.col(f.name).cast(f.dataType) for f in SINK_SCHEMA.fields]).cache()
    try:
        count = rows.count()
        before = sink_table.version()
        if count:
            app_id = f"offset-audit/repair/{incident_id}/replay"
            sink_table.append_once(rows, app_id, 0)
    finally:
        rows.unpersist()
    after = sink_table.version()
    return Replayed(
        records_appended=count if after != before else 0, version_before=before, version_after=after
    )


def delete_duplicates(sink_table: TableHandle, ranges: Sequence[OffsetRange]) -> DuplicatesDeleted:
    """Keep one copy per offset in ``ranges``, the first writer's, in one commit."""
    sink = sink_table.load()
    inside = sink_table.load_with_write_order("_written").where(_in_ranges(ranges))
    first = Window.partitionBy("kafka_topic", "kafka_partition", "kafka_offset").orderBy(
        F.col("_written").asc(), F.col("_checkpoint_id").asc_nulls_last(), F.col("_run_id").asc_nulls_last()
    )
    ranked = inside.withColumn("_copy", F.row_number().over(first)).cache()
    try:
        extra = ranked.where(F.col("_copy") > 1).count()
        before = sink_table.version()
        if extra:
            kept = ranked.where(F.col("_copy") == 1).select(*sink.columns)
            sink_table.replace_where(kept, _predicate(ranges))
    finally:
        ranked.unpersist()
    return DuplicatesDeleted(copies_deleted=extra, version_before=before, version_after=sink_table.version())


def reset_offsets(
    cfg: AppConfig, bootstrap: str, group_id: str, offsets: Sequence[PartitionOffset]
) -> OffsetsReset:
    """Set the group's offsets, only while the group has no active members, and only those that
    differ from what the group holds (``offsets_changed`` counts them)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from app.kafka.clients import librdkafka_conf, retry_kafka
    from app.kafka.group_offsets import group_offsets

    admin = AdminClient(librdkafka_conf(cfg.kafka, bootstrap))
    timeout = cfg.kafka.request_timeout_s
    # Through retry_kafka: a coordinator still loading or moving (NOT_COORDINATOR, ...) is retried
    # within the request timeout; anything else is KafkaUnavailableError (exit 3).
    described = retry_kafka(
        lambda left: admin.describe_consumer_groups([group_id], request_timeout=left)[group_id].result(left),
        f"describing group {group_id} at {bootstrap}",
        timeout,
    )
    if described.members:
        raise UsageError(
            f"group {group_id} has {len(described.members)} active member(s); stop its consumers first"
        )
    wanted = {(o.topic, o.partition): o.offset for o in offsets}
    # Through a consumer of the group, not the Admin API's OffsetFetch: that one kills the process
    # when the coordinator answers NOT_COORDINATOR (app.kafka.group_offsets).
    conf = librdkafka_conf(cfg.kafka, bootstrap)
    held = {tp: h.offset for tp, h in group_offsets(conf, group_id, timeout, sorted(wanted)).items()}
    parts = [
        TopicPartition(t, p, offset)
        for (t, p), offset in sorted(wanted.items())
        if held.get((t, p)) != offset
    ]
    if parts:
        retry_kafka(
            lambda left: admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group_id, parts)], request_timeout=left
            )[group_id].result(left),
            f"setting the offsets of group {group_id} at {bootstrap}",
            timeout,
        )
    return OffsetsReset(group_id=group_id, offsets=tuple(offsets), offsets_changed=len(parts))


def execute(
    spark: SparkSession,
    cfg: AppConfig,
    incident: StoredIncident,
    sink_table: TableHandle,
    bootstrap: Callable[[], str],
) -> RepairOutcome:
    """Run the plan of ``incident``. Sink steps need the reference sink (else UsageError); a job
    whose sink is judged by another mode than coordinates is refused whole (UsageError): its rows
    carry no offsets, so nothing here could write them safely."""
    job = str(incident.job_name)
    mode = cfg.reconcile.sink_mode_for(job)
    if mode != SINK_COORDINATES:
        by_job = job in cfg.reconcile.sink_mode_by_job
        key = f"reconcile.sink_mode_by_job.{job}" if by_job else "reconcile.sink_mode"
        raise UsageError(
            f"repair --execute repairs coordinates sinks only; the sink of job {job} is judged as "
            f"{mode} ({key}): carry out the plan yourself (run repair without --execute "
            "for its startingOffsets/endingOffsets)"
        )
    steps = incident.remedy.steps
    if any(isinstance(s, (ReplayStep, DeleteDuplicatesStep)) for s in steps):
        refused = sink_table.repair_refusal()
        if refused is not None:
            raise UsageError(f"{refused}: only the plan can be produced")
        stored = sink_table.scan()
        if stored is None:
            kind = FORMAT_NAMES[sink_table.table_format]
            raise UsageError(f"no {kind} table at {sink_table.location}, the sink of job {incident.job_name}")
        columns = stored.columns
        if not is_reference_sink(columns):
            raise UsageError(
                f"the sink at {sink_table.location} is not the reference job's raw-record sink (it lacks "
                f"{sorted(set(SINK_SCHEMA.fieldNames()) - set(columns))}): only the plan can be produced"
            )
    actions: list[StepResult] = []
    for step in steps:
        done: StepResult
        if isinstance(step, ReplayStep):
            done = replay(spark, cfg, sink_table, bootstrap(), incident.incident_id, step.ranges)
        elif isinstance(step, DeleteDuplicatesStep):
            done = delete_duplicates(sink_table, step.ranges)
        else:
            done = reset_offsets(cfg, bootstrap(), _group_of(step, incident), step.offsets)
        actions.append(done)
        log.info("repair %s: %s", incident.incident_id, done)
    changed = [a.version_before for a in actions if isinstance(a, SinkCommitted) and a.changed]
    # The version before the first change undoes them all (Delta time travel, Iceberg rollback).
    undo = [sink_table.undo_statement(min(changed))] if changed else []
    return RepairOutcome(tuple(actions), tuple(undo))


def _group_of(step: ResetOffsetsStep, incident: StoredIncident) -> str:
    if step.group_id is None:
        raise UsageError(f"incident {incident.incident_id} names no consumer group whose offsets to reset")
    return step.group_id
