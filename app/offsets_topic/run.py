"""One run of `ingest-offsets`: finish a run that died before its positions, plan this one, write its
data on the route `app.routes.decode_route` chooses (app/offsets_topic/driver_route.py or
spark_route.py), store its positions last.

Recovery. A crash anywhere before the positions' commit leaves the old positions, and the data commits
of a seq that no positions commit completed (app/offsets_topic/bookkeeping.py). The next run first
finishes that pending run, exactly as planned: it appends to the data tables that lack the pending seq
(re-reading the same fixed offset ranges, on whichever route this run takes) and stores its positions.
Only then does it plan its own, possibly longer, range from those positions: nothing is lost, nothing
is counted twice, and a longer re-read can never be dropped by a version-keyed skip.

Transactions. The topic is read with `isolation.level=read_committed` up to the last stable offset, so
aborted transactional offset commits are never seen and a run never ends inside an open transaction.
Neither route sees batch attributes or control records, so whether a surviving commit was
transactional is unknown: group_commits.transactional is null (app/offsets_topic/table_rows.py).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from pyspark.sql import SparkSession

from app.config import AppConfig
from app.kafka.clients import admin_client
from app.offsets_topic.bookkeeping import last_seq, next_seq, read_positions, run_markers, store_positions
from app.offsets_topic.bounds import log_bounds, offsets_topic_partition_count
from app.offsets_topic.driver_route import write_decoded_on_driver
from app.offsets_topic.plan import Clock, IngestPlan, IngestResult, new_run_id, wall_clock_ms
from app.offsets_topic.progress import (
    PartitionProgress,
    times_out_of_range_warning,
    total_progress,
)
from app.offsets_topic.ranges import plan_ranges, select_partitions
from app.offsets_topic.snapshot import snapshot_offsets
from app.offsets_topic.spark_route import write_decoded_on_spark
from app.offsets_topic.tables import DATA_TABLES, DECODE_ERRORS, GROUP_COMMITS, GROUP_EVENTS
from app.routes import DRIVER, decode_route
from app.storage.handles import AuditTables

log = logging.getLogger(__name__)


def plan_ingest(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    run_id: str,
    groups: Sequence[str],
    clock: Clock = wall_clock_ms,
    store: AuditTables | None = None,
) -> IngestPlan:
    """This run's plan: a seq above every committed one, the offsets topic's partitions that hold
    `groups` (all when none), and for each the range from its stored position to the log's end.
    ``store``: the run's tables (else the config's)."""
    store = store or AuditTables.from_config(cfg, spark)
    seq = next_seq(store, clock)
    admin = admin_client(cfg.kafka, bootstrap)
    timeout = cfg.kafka.request_timeout_s
    topic = cfg.ingest.offsets_topic
    count = offsets_topic_partition_count(admin, bootstrap, topic, timeout)
    stored = read_positions(store.ingest_positions)
    if count == 0:
        log.warning("%s does not exist yet (no group has committed): nothing to ingest", topic)
        return IngestPlan(run_id, topic, 0, tuple(groups), stored, (), seq)
    partitions = select_partitions(groups, count)
    start, end = log_bounds(admin, bootstrap, topic, partitions, timeout)
    ranges = plan_ranges(partitions, stored, start, end, cfg.ingest.max_records_per_partition)
    return IngestPlan(run_id, topic, count, tuple(groups), stored, tuple(ranges), seq)


def write_decoded(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    plan: IngestPlan,
    tables: Collection[str] = DATA_TABLES,
    store: AuditTables | None = None,
) -> tuple[list[PartitionProgress], dict[str, int]]:
    """Read and decode the plan's ranges; append them to `tables` under the plan's seq.
    Positions are not touched. ``store``: the run's tables (else the config's)."""
    store = store or AuditTables.from_config(cfg, spark)
    if not plan.to_read:
        return [], {GROUP_COMMITS: 0, GROUP_EVENTS: 0, DECODE_ERRORS: 0}
    master = spark.sparkContext.master or ""
    # The decoded tables are written by the engine of the decode route: their handles' rule.
    route = store.group_commits.on(decode_route(cfg.ingest.decode_on, master)).engine
    log.info("ingest %s: reading and decoding on the %s (ingest.decode_on=%s, master %s)",
             plan.run_id, "driver" if route == DRIVER else "executors", cfg.ingest.decode_on,
             master)  # fmt: skip
    if route == DRIVER:
        return write_decoded_on_driver(spark, cfg, bootstrap, plan, store, tables)
    return write_decoded_on_spark(spark, cfg, bootstrap, plan, store, tables)


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


def finish_pending_run(
    spark: SparkSession, cfg: AppConfig, bootstrap: str, clock: Clock, store: AuditTables
) -> list[str]:
    """Complete a run that committed data but died before its positions; a warning per finished run.

    The pending run is the newest seq in the data tables' markers above the positions' newest seq. Its
    plan comes from its marker: the tables that lack its seq get its rows (the same fixed ranges read
    again), then its positions are stored, so the run ends exactly as it would have.
    """
    markers = {name: run_markers(store.named(name)) for name in DATA_TABLES}
    done = last_seq(run_markers(store.ingest_positions))
    newest = max((m for ms in markers.values() for m in ms), key=lambda m: int(m["ingest_seq"]), default=None)
    if newest is None or int(newest["ingest_seq"]) <= done:
        return []
    plan = IngestPlan.from_marker(newest, read_positions(store.ingest_positions))
    missing = [n for n in DATA_TABLES if plan.seq not in {int(m["ingest_seq"]) for m in markers[n]}]
    parts: list[PartitionProgress] = []
    if missing:
        parts, _ = write_decoded(spark, cfg, bootstrap, plan, missing, store)
    store_positions(store, plan, clock)
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
    tables: AuditTables | None = None,
) -> IngestResult:
    """One run of `ingest-offsets` in ``mode`` (config ``ingest.mode``): 'topic' reads
    `__consumer_offsets` (finish a crashed run, plan, write data idempotently, then positions,
    last); 'snapshot' records the groups' current offsets through the Admin API."""
    rid = run_id or new_run_id()
    store = tables or AuditTables.from_config(cfg, spark)  # a nightly's or watch's, else the config's
    if mode == "snapshot":
        return snapshot_offsets(spark, cfg, bootstrap, groups, rid, clock, store)
    finished = finish_pending_run(spark, cfg, bootstrap, clock, store)
    plan = plan_ingest(spark, cfg, bootstrap, rid, groups, clock, store)
    result = IngestResult(rid, "topic", tuple(groups), warnings=[*finished, *range_warnings(plan)])
    for w in result.warnings:
        log.warning("%s", w)
    log.info(
        "ingest %s: %s partitions %s of %d, %d records to read",
        rid, plan.topic, [r.partition for r in plan.ranges], plan.partition_count,
        sum(r.size for r in plan.ranges),
    )  # fmt: skip
    parts, inserted = write_decoded(spark, cfg, bootstrap, plan, store=store)
    positions = store_positions(store, plan, clock)
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
