"""I/O of `ingest-offsets`: Kafka (Admin API, and Spark's Kafka source or one consumer in the driver,
as `app.routes.decode_route` chooses) in, Delta tables out (through Spark, or delta-rs on the driver path).

Atomicity of data and positions. Delta has no multi-table transactions, so a run is made idempotent and
recoverable instead. Every run has a sequence number (`IngestPlan.seq`, increasing from run to run).
group_commits, group_events and decode_errors are plain appends under Delta's idempotent transaction ids
(`txnAppId` = INGEST_TXN_APP_ID, `txnVersion` = seq; delta-rs writes the same `txn` action on the driver
path): an append whose version the table has already committed is skipped, so writing a run's data
twice never counts it twice. Each data commit records the
run's plan (run id, seq, ranges) in its `userMetadata`. ingest_positions is written last, in one Delta
commit for all partitions, which records the seq it completes.

A crash anywhere before that last commit leaves the old positions, and the data commits of a seq that
no positions commit completed. The next run first finishes that pending run, exactly as planned: it
appends to the data tables that lack the pending seq (re-reading the same fixed offset ranges) and stores
its positions. Only then does it plan its own, possibly longer, range from those positions: nothing is
lost, nothing is counted twice, and a longer re-read can never be dropped by a version-keyed skip.

Transactions. The topic is read with `isolation.level=read_committed` up to the last stable offset, so
aborted transactional offset commits are never seen and a run never ends inside an open transaction.
The Kafka source does not expose batch attributes or control records, so whether a surviving commit was
transactional is unknown: group_commits.transactional is null (see app/offsets_topic/ingest.py).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
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
from app.offsets_topic import driver_io
from app.offsets_topic.driver_io import log_bounds, offsets_topic_partition_count
from app.offsets_topic.ingest import (
    KIND_ROUTED,
    PartitionProgress,
    PartitionRange,
    ProgressRow,
    kafka_read_options,
    merge_positions,
    plan_ranges,
    positions_rows,
    progress_counts,
    select_partitions,
    snapshot_to_group_commits,
    summarize_progress,
    times_out_of_range_warning,
    to_decode_errors,
    to_group_commits,
    to_group_events,
    total_progress,
)
from app.offsets_topic.jvm_decode import decode_or_route, decode_routed
from app.offsets_topic.tables import (
    DATA_TABLES,
    DECODE_ERRORS,
    GROUP_COMMITS,
    GROUP_EVENTS,
    INGEST_POSITIONS,
    INGEST_TXN_APP_ID,
    TABLE_KINDS,
)
from app.routes import DRIVER, decode_route
from app.storage import delta_rows

log = logging.getLogger(__name__)

_DEPRECATED_OFFSET_FETCHING = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"

Clock = Callable[[], int]  # epoch milliseconds


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def new_run_id() -> str:
    return "ingest-" + uuid.uuid4().hex[:12]


# --- Kafka ---------------------------------------------------------------------------------------


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
    rows = delta_rows.read_columns(spark, path, ["log_partition", "next_offset"]) or []
    return {int(r["log_partition"]): int(r["next_offset"]) for r in rows}


_HISTORY_DEPTH = 25  # recent commits searched for the last run's marker; ingest writes one per run


def append_run(
    spark: SparkSession, path: str, schema: StructType, rows: DataFrame, seq: int, marker: str
) -> None:
    """Append a run's rows under (INGEST_TXN_APP_ID, seq): Delta skips it if `seq` is already committed."""
    ensure_table(spark, path, schema)
    (
        rows.write.format("delta")
        .mode("append")
        .option("txnAppId", INGEST_TXN_APP_ID)
        .option("txnVersion", str(seq))
        .option("userMetadata", marker)
        .save(path)
    )


def commit_user_metadata(spark: SparkSession, path: str) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of a table's recent commits; none when there is no table.

    Every run of `ingest-offsets` reads these several times, also when it has nothing to read:
    delta-rs reads them from the log in milliseconds, where Spark runs a job each time.
    """
    return delta_rows.commit_metadata(spark, path, _HISTORY_DEPTH)


def run_markers(spark: SparkSession, path: str) -> list[dict[str, Any]]:
    """The run markers ({"ingest_seq", "ingest_run_id", ...}) of a table's recent commits, newest first."""
    out = []
    for _, metadata in sorted(commit_user_metadata(spark, path), key=lambda c: -c[0]):
        try:
            marker = json.loads(metadata or "")
        except ValueError:
            continue  # a commit by someone else (OPTIMIZE, a repair, snapshot mode)
        if isinstance(marker, dict) and "ingest_seq" in marker:
            out.append(marker)
    return out


def last_seq(markers: Sequence[dict[str, Any]]) -> int:
    return max((int(m["ingest_seq"]) for m in markers), default=-1)


# --- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestPlan:
    run_id: str
    topic: str
    partition_count: int
    groups: tuple[str, ...]
    stored: Mapping[int, int]
    ranges: tuple[PartitionRange, ...]
    seq: int = 0  # the run's Delta txnVersion: larger than every seq committed before

    @property
    def to_read(self) -> tuple[PartitionRange, ...]:
        return tuple(r for r in self.ranges if r.size > 0)

    def marker(self) -> str:
        """What the run's commits record: enough to finish the run if it dies before its positions."""
        return json.dumps(
            {
                "ingest_seq": self.seq,
                "ingest_run_id": self.run_id,
                "topic": self.topic,
                "partition_count": self.partition_count,
                "groups": list(self.groups),
                "ranges": [[r.partition, r.start, r.end] for r in self.to_read],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_marker(cls, marker: Mapping[str, Any], stored: Mapping[int, int]) -> IngestPlan:
        ranges = tuple(
            PartitionRange(int(p), int(lo), int(hi), stored.get(int(p))) for p, lo, hi in marker["ranges"]
        )
        return cls(
            run_id=str(marker["ingest_run_id"]),
            topic=str(marker["topic"]),
            partition_count=int(marker["partition_count"]),
            groups=tuple(marker["groups"]),
            stored=stored,
            ranges=ranges,
            seq=int(marker["ingest_seq"]),
        )


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


def next_seq(spark: SparkSession, cfg: AppConfig, clock: Clock) -> int:
    """A seq above every one committed: the clock, or one more than the last seq if the clock lags."""
    seen = max(last_seq(run_markers(spark, cfg.paths.table(t))) for t in (*DATA_TABLES, INGEST_POSITIONS))
    return max(clock(), seen + 1)


def plan_ingest(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    run_id: str,
    groups: Sequence[str],
    clock: Clock = wall_clock_ms,
) -> IngestPlan:
    seq = next_seq(spark, cfg, clock)
    admin = admin_client(cfg.kafka, bootstrap)
    timeout = cfg.kafka.request_timeout_s
    topic = cfg.ingest.offsets_topic
    count = offsets_topic_partition_count(admin, bootstrap, topic, timeout)
    stored = read_positions(spark, cfg.paths.table(INGEST_POSITIONS))
    if count == 0:
        log.warning("%s does not exist yet (no group has committed): nothing to ingest", topic)
        return IngestPlan(run_id, topic, 0, tuple(groups), stored, (), seq)
    partitions = select_partitions(groups, count)
    start, end = log_bounds(admin, bootstrap, topic, partitions, timeout)
    ranges = plan_ranges(partitions, stored, start, end, cfg.ingest.max_records_per_partition)
    return IngestPlan(run_id, topic, count, tuple(groups), stored, tuple(ranges), seq)


def _progress_rows(decoded: DataFrame) -> list[ProgressRow]:
    return [
        (int(r.log_partition), str(r.kind), r.record_type, int(r.records), int(r.times_out_of_range))
        for r in progress_counts(decoded).collect()
    ]


@contextlib.contextmanager
def decoded_once(
    kafka_df: DataFrame, groups: Collection[str]
) -> Iterator[tuple[DataFrame, list[ProgressRow]]]:
    """The decoded records (DECODED_SCHEMA, one row per record) and their progress counts, with Kafka
    read once and the Python decoder run only over the records the JVM left to it, if any.

    The JVM's pass is persisted while the counts are taken: that one action reads Kafka, and every
    append after it reads the cache. The routed records (group metadata, malformed bytes: few on a
    busy cluster) are then decoded in Python from the cached raw bytes, persisted too, so each record
    is decoded once whatever the number of appends. (A recomputation after eviction is still correct:
    the ranges are fixed offsets.) Both are unpersisted on exit. A key of the counts may come twice,
    once per decoder; `summarize_progress` adds them up.
    """
    staged = decode_or_route(kafka_df, groups).persist(StorageLevel.MEMORY_AND_DISK)
    held = [staged]
    try:
        counts = _progress_rows(staged)
        decoded = staged
        if any(c[1] == KIND_ROUTED for c in counts):
            in_python = decode_routed(staged, groups).persist(StorageLevel.MEMORY_AND_DISK)
            held.append(in_python)
            counts = [c for c in counts if c[1] != KIND_ROUTED] + _progress_rows(in_python)
            decoded = staged.where(F.col("kind") != KIND_ROUTED).unionByName(in_python)
        yield decoded, counts
    finally:
        for df in held:
            df.unpersist()


# (table, schema, transform, the kinds it holds)
_DATA_TARGETS: tuple[tuple[str, StructType, Callable[[DataFrame, str], DataFrame], tuple[str, ...]], ...] = (
    (GROUP_COMMITS, GROUP_COMMITS_SCHEMA, to_group_commits, TABLE_KINDS[GROUP_COMMITS]),
    (GROUP_EVENTS, GROUP_EVENTS_SCHEMA, to_group_events, TABLE_KINDS[GROUP_EVENTS]),
    (DECODE_ERRORS, DECODE_ERRORS_SCHEMA, to_decode_errors, TABLE_KINDS[DECODE_ERRORS]),
)


def _append_decoded(
    spark: SparkSession,
    cfg: AppConfig,
    plan: IngestPlan,
    decoded: DataFrame,
    counts: Sequence[ProgressRow],
    tables: Collection[str],
) -> dict[str, int]:
    """Each of `tables` gets its kinds of `decoded` in one idempotent append; rows appended per table."""
    kinds = {kind for _, kind, _, n, _ in counts if n > 0}
    inserted = {}
    marker = plan.marker()
    for name, schema, transform, wanted in _DATA_TARGETS:
        path = cfg.paths.table(name)
        if name not in tables or kinds.isdisjoint(wanted):
            # decode_errors and, for offset-only committers, group_events are usually empty: no
            # commit for them. The table is still created for its readers.
            ensure_table(spark, path, schema)
            inserted[name] = 0
            continue
        append_run(spark, path, schema, transform(decoded, plan.run_id), plan.seq, marker)
        inserted[name] = sum(n for _, kind, _, n, _ in counts if kind in wanted)
    return inserted


def write_decoded(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    plan: IngestPlan,
    tables: Collection[str] = DATA_TABLES,
) -> tuple[list[PartitionProgress], dict[str, int]]:
    """Read and decode the plan's ranges; append them to `tables` under the plan's seq.
    Positions are not touched."""
    todo = plan.to_read
    if not todo:
        return [], {GROUP_COMMITS: 0, GROUP_EVENTS: 0, DECODE_ERRORS: 0}
    master = spark.sparkContext.master or ""
    path = decode_route(cfg.ingest.decode_on, master)
    log.info("ingest %s: reading and decoding on the %s (ingest.decode_on=%s, master %s)",
             plan.run_id, "driver" if path == DRIVER else "executors", cfg.ingest.decode_on,
             master)  # fmt: skip
    if path == DRIVER:
        return driver_io.write_decoded_on_driver(spark, cfg, bootstrap, plan, tables)
    # Spark's default Admin-based offset fetching lists topics without internal ones, so `assign` on
    # __consumer_offsets finds no partitions ("Assigned: Set()"); the consumer-based path sees them.
    # Set for this read only and restored after, as other jobs may share the session.
    previous = spark.conf.get(_DEPRECATED_OFFSET_FETCHING, None)
    spark.conf.set(_DEPRECATED_OFFSET_FETCHING, "true")
    try:
        with decoded_once(read_offsets_topic(spark, cfg, bootstrap, todo), plan.groups) as (decoded, counts):
            inserted = _append_decoded(spark, cfg, plan, decoded, counts, tables)
    except InfrastructureError:
        raise
    except Exception as exc:
        if "kafka" in type(exc).__name__.lower() or "TimeoutException" in str(exc):
            raise KafkaUnavailableError(f"reading {plan.topic} through Spark failed: {exc}") from exc
        raise
    finally:
        if previous is None:
            spark.conf.unset(_DEPRECATED_OFFSET_FETCHING)
        else:
            spark.conf.set(_DEPRECATED_OFFSET_FETCHING, previous)
    return summarize_progress(counts), inserted


def store_positions(spark: SparkSession, cfg: AppConfig, plan: IngestPlan, clock: Clock) -> dict[int, int]:
    """The last step of a run: one Delta commit moving every read partition to the end of its range
    (none when nothing was read)."""
    positions = merge_positions(plan.stored, plan.ranges)
    moved = [r.partition for r in plan.to_read]
    rows = [
        {"log_partition": p, "next_offset": n, "ingest_run_id": rid, "updated_at": _utc(ms)}
        for p, n, rid, ms in positions_rows(positions, moved, plan.run_id, clock())
    ]
    # A few rows on the driver: delta-rs commits them without a Spark job. The marker is the
    # commit's userMetadata, read back by `run_markers` like the data tables' markers.
    delta_rows.merge_rows(
        spark, cfg.paths.table(INGEST_POSITIONS), INGEST_POSITIONS_SCHEMA, rows, "log_partition",
        user_metadata=plan.marker(),
    )  # fmt: skip
    return positions


def _utc(epoch_ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC)


def log_progress(plan: IngestPlan, parts: Sequence[PartitionProgress], total: PartitionProgress) -> None:
    by_partition = {p.partition: p for p in parts}
    for r in plan.ranges:
        p = by_partition.get(r.partition, PartitionProgress(r.partition))
        log.info(
            "%s-%d [%d, %d): read %d, decoded %d (times out of range %d), other groups %d, "
            "skipped by type %s, quarantined %d",
            plan.topic, r.partition, r.start, r.end, p.read, p.decoded, p.times_out_of_range,
            p.other_groups, dict(p.skipped_by_type), p.quarantined,
        )  # fmt: skip
    log.info(
        "%s total, %d partitions: read %d, decoded %d (times out of range %d), other groups %d, "
        "skipped by type %s, quarantined %d",
        plan.topic, len(plan.ranges), total.read, total.decoded, total.times_out_of_range,
        total.other_groups, dict(total.skipped_by_type), total.quarantined,
    )  # fmt: skip


def _time_warnings(topic: str, parts: Sequence[PartitionProgress]) -> list[str]:
    """The warning about times stored as null, logged, as a list of none or one."""
    warning = times_out_of_range_warning(topic, parts)
    if warning is None:
        return []
    log.warning("%s", warning)
    return [warning]


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


def finish_pending_run(spark: SparkSession, cfg: AppConfig, bootstrap: str, clock: Clock) -> list[str]:
    """Complete a run that committed data but died before its positions; a warning per finished run.

    The pending run is the newest seq in the data tables' markers above the positions' newest seq. Its
    plan comes from its marker: the tables that lack its seq get its rows (the same fixed ranges read
    again), then its positions are stored, so the run ends exactly as it would have.
    """
    markers = {name: run_markers(spark, cfg.paths.table(name)) for name in DATA_TABLES}
    done = last_seq(run_markers(spark, cfg.paths.table(INGEST_POSITIONS)))
    newest = max((m for ms in markers.values() for m in ms), key=lambda m: int(m["ingest_seq"]), default=None)
    if newest is None or int(newest["ingest_seq"]) <= done:
        return []
    plan = IngestPlan.from_marker(newest, read_positions(spark, cfg.paths.table(INGEST_POSITIONS)))
    missing = [n for n in DATA_TABLES if plan.seq not in {int(m["ingest_seq"]) for m in markers[n]}]
    parts: list[PartitionProgress] = []
    if missing:
        parts, _ = write_decoded(spark, cfg, bootstrap, plan, missing)
    store_positions(spark, cfg, plan, clock)
    warning = (
        f"run {plan.run_id} stopped after writing data and before storing positions; finished it "
        f"(tables written now: {', '.join(missing) or 'none'}; positions stored)"
    )
    log.warning("%s", warning)
    return [warning, *_time_warnings(plan.topic, parts)]


def ingest_offsets(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    groups: Sequence[str] = (),
    run_id: str | None = None,
    clock: Clock = wall_clock_ms,
    *,
    mode: str = "topic",
) -> IngestResult:
    """One run of `ingest-offsets` in ``mode`` (config ``ingest.mode``): 'topic' reads
    `__consumer_offsets` (finish a crashed run, plan, write data idempotently, then positions,
    last); 'snapshot' records the groups' current offsets through the Admin API."""
    rid = run_id or new_run_id()
    if mode == "snapshot":
        return _snapshot_offsets(spark, cfg, bootstrap, groups, rid, clock)
    finished = finish_pending_run(spark, cfg, bootstrap, clock)
    plan = plan_ingest(spark, cfg, bootstrap, rid, groups, clock)
    result = IngestResult(rid, "topic", tuple(groups), warnings=[*finished, *range_warnings(plan)])
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
    result.warnings.extend(_time_warnings(plan.topic, parts))
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


def _snapshot_offsets(
    spark: SparkSession, cfg: AppConfig, bootstrap: str, groups: Sequence[str], rid: str, clock: Clock
) -> IngestResult:
    """Snapshot mode: the current committed offsets, appended as record_kind 'snapshot'.

    log_time holds the moment of the snapshot; commit_time, log coordinates and versions are null,
    because the Admin API reports none of them.
    """
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
