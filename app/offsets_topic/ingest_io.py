"""I/O of `ingest-offsets`: Kafka (Admin API and Spark's Kafka source) in, Delta tables out.

Atomicity of data and positions. Delta has no multi-table transactions, so the run is made idempotent
instead: group_commits, group_events and decode_errors are written with an insert-only MERGE on
`(log_partition, log_offset)`, the record's unique coordinates in `__consumer_offsets`, and
ingest_positions is written last, in one Delta commit for all partitions. A crash anywhere before that last
commit leaves the old positions, so the next run reads the same range again (and possibly more) and the
MERGE inserts only the rows that are not there yet: nothing is lost, nothing is counted twice. A crash
after it has nothing left to do. (Delta's txnAppId/txnVersion idempotent appends were not used: a re-run
after a crash may read a longer range than the crashed one, and a version-keyed skip would drop the new
tail.)

Transactions. The topic is read with `isolation.level=read_committed` up to the last stable offset, so
aborted transactional offset commits are never seen and a run never ends inside an open transaction.
The Kafka source does not expose batch attributes or control records, so whether a surviving commit was
transactional is unknown: group_commits.transactional is null (see app/offsets_topic/ingest.py).
"""

from __future__ import annotations

import functools
import logging
import time
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from app.config import AppConfig
from app.contracts.tables import (
    DECODE_ERRORS_SCHEMA,
    GROUP_COMMITS_SCHEMA,
    GROUP_EVENTS_SCHEMA,
    INGEST_POSITIONS_SCHEMA,
)
from app.errors import InfrastructureError, KafkaUnavailableError
from app.kafka.clients import (
    admin_client,
    is_retriable,
    raise_partition_errors,
    retry_kafka,
    spark_kafka_options,
)
from app.offsets_topic.ingest import (
    KIND_COMMIT,
    KIND_ERROR,
    KIND_GROUP_METADATA,
    KIND_GROUP_TOMBSTONE,
    KIND_TOMBSTONE,
    PartitionProgress,
    PartitionRange,
    decode,
    kafka_read_options,
    merge_positions,
    plan_ranges,
    positions_frame,
    positions_rows,
    progress_counts,
    select_partitions,
    snapshot_to_group_commits,
    summarize_progress,
    to_decode_errors,
    to_group_commits,
    to_group_events,
    total_progress,
)

log = logging.getLogger(__name__)

GROUP_COMMITS = "group_commits"
GROUP_EVENTS = "group_events"
DECODE_ERRORS = "decode_errors"
INGEST_POSITIONS = "ingest_positions"
TABLE_SCHEMAS: Mapping[str, StructType] = {
    GROUP_COMMITS: GROUP_COMMITS_SCHEMA,
    GROUP_EVENTS: GROUP_EVENTS_SCHEMA,
    DECODE_ERRORS: DECODE_ERRORS_SCHEMA,
    INGEST_POSITIONS: INGEST_POSITIONS_SCHEMA,
}

_DEPRECATED_OFFSET_FETCHING = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"

Clock = Callable[[], int]  # epoch milliseconds


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def new_run_id() -> str:
    return "ingest-" + uuid.uuid4().hex[:12]


# --- Kafka ---------------------------------------------------------------------------------------


def offsets_topic_partition_count(admin: AdminClient, bootstrap: str, topic: str, timeout_s: float) -> int:
    """Partitions of the offsets topic as the cluster reports them; 0 if it does not exist yet."""
    md = retry_kafka(
        lambda left: admin.list_topics(topic=topic, timeout=left),
        f"metadata request to {bootstrap}",
        timeout_s,
    )
    info = md.topics.get(topic)
    if info is None or info.error is not None:
        # The broker creates __consumer_offsets on the first group request; no topic means no commits yet.
        return 0
    return len(info.partitions)


def log_bounds(
    admin: AdminClient, bootstrap: str, topic: str, partitions: Sequence[int], timeout_s: float
) -> tuple[dict[int, int], dict[int, int]]:
    """(log start, last stable offset) per partition. The LSO bounds a read_committed read."""

    def ask(spec: OffsetSpec, left: float) -> dict[int, int]:
        request = {TopicPartition(topic, p): spec for p in partitions}
        futures = admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=left
        )
        return {tp.partition: f.result(left).offset for tp, f in futures.items()}

    # confluent-kafka's OffsetSpec factories carry no annotations; the casts only name what they return.
    earliest = typing.cast(Callable[[], OffsetSpec], OffsetSpec.earliest)()
    latest = typing.cast(Callable[[], OffsetSpec], OffsetSpec.latest)()
    deadline = time.monotonic() + timeout_s  # one budget for both requests
    start = retry_kafka(functools.partial(ask, earliest), f"list_offsets(earliest) at {bootstrap}", timeout_s)
    end = retry_kafka(
        functools.partial(ask, latest),
        f"list_offsets(latest, read_committed) at {bootstrap}",
        max(deadline - time.monotonic(), 0.001),
    )
    return start, end


def read_offsets_topic(
    spark: SparkSession, cfg: AppConfig, bootstrap: str, ranges: Sequence[PartitionRange]
) -> DataFrame:
    """A fixed, recorded slice of the offsets topic: exactly `ranges`, committed records only."""
    reader = (
        spark.read.format("kafka")
        .options(**spark_kafka_options(cfg.kafka, bootstrap))
        .option("kafka.isolation.level", "read_committed")
        .options(**kafka_read_options(cfg.ingest.offsets_topic, ranges))
    )
    if cfg.ingest.min_partitions > 0:
        reader = reader.option("minPartitions", str(cfg.ingest.min_partitions))
    return reader.load()


# --- Delta ---------------------------------------------------------------------------------------


def ensure_table(spark: SparkSession, path: str, schema: StructType) -> DeltaTable:
    table: DeltaTable = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema).execute()
    return table


def read_positions(spark: SparkSession, path: str) -> dict[int, int]:
    if not DeltaTable.isDeltaTable(spark, path):
        return {}
    rows = spark.read.format("delta").load(path).select("log_partition", "next_offset").collect()
    return {int(r.log_partition): int(r.next_offset) for r in rows}


def insert_new_records(
    spark: SparkSession, path: str, schema: StructType, rows: DataFrame, ranges: Sequence[PartitionRange]
) -> int:
    """Insert-only MERGE on (log_partition, log_offset): rows already present (a re-read after a crash)
    are left alone. The range predicate lets Delta skip files outside this run's partitions/offsets."""
    target = ensure_table(spark, path, schema)
    partitions = ",".join(str(r.partition) for r in ranges)
    low = min(r.start for r in ranges)
    condition = (
        "t.log_partition = s.log_partition AND t.log_offset = s.log_offset"
        f" AND t.log_partition IN ({partitions}) AND t.log_offset >= {low}"
    )
    metrics = target.alias("t").merge(rows.alias("s"), condition).whenNotMatchedInsertAll().execute()
    first = metrics.first() if metrics is not None else None
    return int(first["num_inserted_rows"]) if first is not None else -1


def upsert_positions(spark: SparkSession, path: str, rows: DataFrame) -> None:
    target = ensure_table(spark, path, INGEST_POSITIONS_SCHEMA)
    (
        target.alias("t")
        .merge(rows.alias("s"), "t.log_partition = s.log_partition")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )


# --- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestPlan:
    run_id: str
    topic: str
    partition_count: int
    groups: tuple[str, ...]
    stored: Mapping[int, int]
    ranges: tuple[PartitionRange, ...]

    @property
    def to_read(self) -> tuple[PartitionRange, ...]:
        return tuple(r for r in self.ranges if r.size > 0)


@dataclass
class IngestResult:
    run_id: str
    mode: str
    groups: tuple[str, ...]
    partitions: list[dict[str, Any]] = field(default_factory=list)
    total: dict[str, Any] = field(default_factory=dict)
    inserted: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "groups": list(self.groups),
            "partitions": self.partitions,
            "total": self.total,
            "inserted": self.inserted,
            "warnings": self.warnings,
            "decode_errors": self.total.get("quarantined", 0),
        }


def plan_ingest(
    spark: SparkSession, cfg: AppConfig, bootstrap: str, run_id: str, groups: Sequence[str]
) -> IngestPlan:
    admin = admin_client(cfg.kafka, bootstrap)
    timeout = cfg.kafka.request_timeout_s
    topic = cfg.ingest.offsets_topic
    count = offsets_topic_partition_count(admin, bootstrap, topic, timeout)
    stored = read_positions(spark, cfg.paths.table(INGEST_POSITIONS))
    if count == 0:
        log.warning("%s does not exist yet (no group has committed): nothing to ingest", topic)
        return IngestPlan(run_id, topic, 0, tuple(groups), stored, ())
    partitions = select_partitions(groups, count)
    start, end = log_bounds(admin, bootstrap, topic, partitions, timeout)
    ranges = plan_ranges(partitions, stored, start, end, cfg.ingest.max_records_per_partition)
    return IngestPlan(run_id, topic, count, tuple(groups), stored, tuple(ranges))


def write_decoded(
    spark: SparkSession, cfg: AppConfig, bootstrap: str, plan: IngestPlan
) -> tuple[list[PartitionProgress], dict[str, int]]:
    """Read, decode and MERGE the plan's ranges into the three data tables. Positions are not touched."""
    todo = plan.to_read
    if not todo:
        return [], {GROUP_COMMITS: 0, GROUP_EVENTS: 0, DECODE_ERRORS: 0}
    # Spark's default Admin-based offset fetching lists topics without internal ones, so `assign` on
    # __consumer_offsets finds no partitions ("Assigned: Set()"); the consumer-based path sees them.
    # Set for this read only and restored after, as other jobs may share the session.
    previous = spark.conf.get(_DEPRECATED_OFFSET_FETCHING, None)
    spark.conf.set(_DEPRECATED_OFFSET_FETCHING, "true")
    decoded = decode(read_offsets_topic(spark, cfg, bootstrap, todo), plan.groups)
    # Four actions use the decoded rows; persisting keeps Kafka to one read and Python to one decode.
    # (A recomputation after eviction is still correct: the ranges are fixed offsets.)
    decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = [
            (int(r.log_partition), str(r.kind), r.record_type, int(r.records))
            for r in progress_counts(decoded).collect()
        ]
        kinds = {kind for _, kind, _, n in counts if n > 0}
        targets = [
            (GROUP_COMMITS, GROUP_COMMITS_SCHEMA, to_group_commits, (KIND_COMMIT, KIND_TOMBSTONE)),
            (GROUP_EVENTS, GROUP_EVENTS_SCHEMA, to_group_events, (KIND_GROUP_METADATA, KIND_GROUP_TOMBSTONE)),
            (DECODE_ERRORS, DECODE_ERRORS_SCHEMA, to_decode_errors, (KIND_ERROR,)),
        ]
        inserted = {}
        for name, schema, transform, wanted in targets:
            path = cfg.paths.table(name)
            if kinds.isdisjoint(wanted):
                # A MERGE costs seconds even when empty; decode_errors and, for offset-only committers,
                # group_events are usually empty. The table is still created for its readers.
                ensure_table(spark, path, schema)
                inserted[name] = 0
            else:
                inserted[name] = insert_new_records(
                    spark, path, schema, transform(decoded, plan.run_id), todo
                )
    except InfrastructureError:
        raise
    except Exception as exc:
        if "kafka" in type(exc).__name__.lower() or "TimeoutException" in str(exc):
            raise KafkaUnavailableError(f"reading {plan.topic} through Spark failed: {exc}") from exc
        raise
    finally:
        decoded.unpersist()
        if previous is None:
            spark.conf.unset(_DEPRECATED_OFFSET_FETCHING)
        else:
            spark.conf.set(_DEPRECATED_OFFSET_FETCHING, previous)
    return summarize_progress(counts), inserted


def store_positions(spark: SparkSession, cfg: AppConfig, plan: IngestPlan, clock: Clock) -> dict[int, int]:
    """The last step of a run: one Delta commit moving every read partition to the end of its range."""
    positions = merge_positions(plan.stored, plan.ranges)
    moved = [r.partition for r in plan.to_read]
    rows = positions_rows(positions, moved, plan.run_id, clock())
    if rows:
        schema = "log_partition int, next_offset long, ingest_run_id string, updated_at_ms long"
        upsert_positions(
            spark, cfg.paths.table(INGEST_POSITIONS), positions_frame(spark.createDataFrame(rows, schema))
        )
    return positions


def log_progress(plan: IngestPlan, parts: Sequence[PartitionProgress], total: PartitionProgress) -> None:
    by_partition = {p.partition: p for p in parts}
    for r in plan.ranges:
        p = by_partition.get(r.partition, PartitionProgress(r.partition))
        log.info(
            "%s-%d [%d, %d): read %d, decoded %d, other groups %d, skipped by type %s, quarantined %d",
            plan.topic, r.partition, r.start, r.end, p.read, p.decoded, p.other_groups,
            dict(p.skipped_by_type), p.quarantined,
        )  # fmt: skip
    log.info(
        "%s total, %d partitions: read %d, decoded %d, other groups %d, skipped by type %s, quarantined %d",
        plan.topic, len(plan.ranges), total.read, total.decoded, total.other_groups,
        dict(total.skipped_by_type), total.quarantined,
    )  # fmt: skip


def range_warnings(plan: IngestPlan) -> list[str]:
    out = []
    for r in plan.ranges:
        if r.note == "retention":
            out.append(
                f"{plan.topic}-{r.partition}: stored position {r.stored} is below the log start {r.start}; "
                f"records [{r.stored}, {r.start}) were compacted or deleted before this audit read them"
            )
        elif r.note == "ahead":
            out.append(
                f"{plan.topic}-{r.partition}: stored position {r.stored} is beyond the log end; the topic "
                "was recreated or another cluster is configured; nothing read (clear ingest_positions to "
                "restart)"
            )
    return out


def ingest_offsets(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    groups: Sequence[str] = (),
    run_id: str | None = None,
    clock: Clock = wall_clock_ms,
) -> IngestResult:
    """One topic-mode run: plan, write data (idempotent), then positions (last)."""
    rid = run_id or new_run_id()
    plan = plan_ingest(spark, cfg, bootstrap, rid, groups)
    result = IngestResult(rid, "topic", tuple(groups), warnings=range_warnings(plan))
    for w in result.warnings:
        log.warning("%s", w)
    log.info(
        "ingest %s: %s partitions %s of %d, %d records to read",
        rid, plan.topic, [r.partition for r in plan.ranges], plan.partition_count,
        sum(r.size for r in plan.ranges),
    )  # fmt: skip
    parts, inserted = write_decoded(spark, cfg, bootstrap, plan)
    positions = store_positions(spark, cfg, plan, clock)
    total = total_progress(parts)
    log_progress(plan, parts, total)
    by_partition = {p.partition: p for p in parts}
    result.partitions = [
        {
            **by_partition.get(r.partition, PartitionProgress(r.partition)).as_dict(),
            "start": r.start,
            "end": r.end,
            "next_offset": positions.get(r.partition),
        }
        for r in plan.ranges
    ]
    result.total = {k: v for k, v in total.as_dict().items() if k != "partition"}
    result.inserted = inserted
    return result


# --- snapshot mode -------------------------------------------------------------------------------


def list_group_ids(admin: AdminClient, bootstrap: str, timeout_s: float) -> list[str]:
    listing = retry_kafka(
        lambda left: admin.list_consumer_groups(request_timeout=left).result(left),
        f"list_consumer_groups at {bootstrap}",
        timeout_s,
    )
    return sorted(g.group_id for g in listing.valid)


def committed_offsets(
    admin: AdminClient, bootstrap: str, groups: Sequence[str], timeout_s: float
) -> list[tuple[str, str, int, int, int | None, str]]:
    """(group, topic, partition, offset, leader_epoch, metadata) for every committed offset of `groups`."""

    def ask(group: str, left: float) -> Any:
        # librdkafka answers one group per request.
        request = [ConsumerGroupTopicPartitions(group)]
        answer = admin.list_consumer_group_offsets(request, request_timeout=left)[group].result(left)
        # A partition the coordinator cannot answer for yet (UNSTABLE_OFFSET_COMMIT, a coordinator
        # loading) is asked again rather than recorded as having no commit.
        raise_partition_errors(
            tp.error for tp in answer.topic_partitions if tp.error is not None and is_retriable(tp.error)
        )
        return answer

    deadline = time.monotonic() + timeout_s  # one budget for all groups
    out = []
    for group in groups:
        answer = retry_kafka(
            functools.partial(ask, group),
            f"list_consumer_group_offsets({group}) at {bootstrap}",
            max(deadline - time.monotonic(), 0.001),
        )
        for tp in answer.topic_partitions:
            if tp.error is not None or tp.offset < 0:
                continue  # no committed offset for this partition
            epoch = tp.leader_epoch if tp.leader_epoch is not None and tp.leader_epoch >= 0 else None
            out.append((group, tp.topic, tp.partition, tp.offset, epoch, tp.metadata or ""))
    return out


def snapshot_offsets(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    groups: Sequence[str] = (),
    run_id: str | None = None,
    clock: Clock = wall_clock_ms,
) -> IngestResult:
    """Snapshot mode: the current committed offsets, appended as record_kind 'snapshot'.

    log_time holds the moment of the snapshot; commit_time, log coordinates and versions are null,
    because the Admin API reports none of them.
    """
    rid = run_id or new_run_id()
    log.warning(
        "ingest %s in snapshot mode: only the current committed offsets are recorded; commit history, "
        "tombstones and group metadata are unavailable in this mode",
        rid,
    )
    admin = admin_client(cfg.kafka, bootstrap)
    timeout = cfg.kafka.request_timeout_s
    chosen = list(groups) or list_group_ids(admin, bootstrap, timeout)
    now_ms = clock()
    offsets = committed_offsets(admin, bootstrap, chosen, timeout)
    schema = (
        "group_id string, topic string, partition int, committed_offset long, leader_epoch int, "
        "metadata string, log_time_ms long"
    )
    df = spark.createDataFrame([(*o, now_ms) for o in offsets], schema)
    path = cfg.paths.table(GROUP_COMMITS)
    ensure_table(spark, path, GROUP_COMMITS_SCHEMA)
    snapshot_to_group_commits(df, rid).write.format("delta").mode("append").save(path)
    log.info("ingest %s: %d committed offsets of %d groups recorded", rid, len(offsets), len(chosen))
    result = IngestResult(rid, "snapshot", tuple(chosen))
    result.total = {"read": len(offsets), "decoded": len(offsets), "quarantined": 0}
    result.inserted = {GROUP_COMMITS: len(offsets)}
    return result
