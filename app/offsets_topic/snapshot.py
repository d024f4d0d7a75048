"""Snapshot mode of `ingest-offsets` (config `ingest.mode: snapshot`), for where `__consumer_offsets`
may not be read: the groups' current committed offsets, asked of each group's coordinator, appended
to group_commits as record_kind 'snapshot'. No history, tombstones or group metadata: the
coordinator reports none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig
from app.contracts.tables import GROUP_COMMITS_SCHEMA, conform, require_columns
from app.kafka.clients import admin_client, librdkafka_conf, retry_kafka
from app.kafka.group_offsets import group_offsets
from app.offsets_topic.plan import Clock, IngestResult
from app.offsets_topic.tables import GROUP_COMMITS
from app.routes import SPARK
from app.storage.handles import AuditTables

log = logging.getLogger(__name__)

SNAPSHOT_INPUT_COLUMNS: Final = (
    "group_id", "topic", "partition", "committed_offset", "leader_epoch", "metadata", "log_time_ms",
)  # fmt: skip


def snapshot_to_group_commits(offsets: DataFrame, run_id: str) -> DataFrame:
    """Committed offsets -> group_commits rows of record_kind 'snapshot'.

    log_time is when the snapshot was taken; what an offset fetch does not report (commit time, log
    coordinates, value version, transactional) stays null rather than being guessed.
    """
    require_columns(offsets, SNAPSHOT_INPUT_COLUMNS, "committed offsets")
    out = (
        offsets.withColumn("commit_time", F.lit(None).cast("timestamp"))
        .withColumn("expire_time", F.lit(None).cast("timestamp"))
        .withColumn("record_kind", F.lit("snapshot"))
        .withColumn("value_version", F.lit(None).cast("int"))
        .withColumn("transactional", F.lit(None).cast("boolean"))
        .withColumn("log_partition", F.lit(None).cast("int"))
        .withColumn("log_offset", F.lit(None).cast("long"))
        .withColumn("log_time", F.timestamp_millis("log_time_ms"))  # the clock's now: in range
        .withColumn("ingest_run_id", F.lit(run_id))
    )
    return conform(out, GROUP_COMMITS_SCHEMA)


def list_group_ids(admin: AdminClient, bootstrap: str, timeout_s: float) -> list[str]:
    listing = retry_kafka(
        lambda left: admin.list_consumer_groups(request_timeout=left).result(left),
        f"list_consumer_groups at {bootstrap}",
        timeout_s,
    )
    return sorted(g.group_id for g in listing.valid)


def committed_offsets(
    conf: Mapping[str, Any], groups: Sequence[str], timeout_s: float
) -> list[tuple[str, str, int, int, int | None, str]]:
    """(group, topic, partition, offset, leader_epoch, metadata) for every committed offset of `groups`
    on a topic the cluster still has: through a consumer of each group, never the Admin API's
    OffsetFetch, which kills the process when a coordinator is loading (app.kafka.group_offsets)."""
    deadline = time.monotonic() + timeout_s  # one budget for all groups
    out = []
    for group in groups:
        held = group_offsets(conf, group, max(deadline - time.monotonic(), 0.001))
        for (topic, partition), h in sorted(held.items()):
            out.append((group, topic, partition, h.offset, h.leader_epoch, h.metadata))
    return out


def snapshot_offsets(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    groups: Sequence[str],
    rid: str,
    clock: Clock,
    store: AuditTables,
) -> IngestResult:
    """Snapshot mode: the current committed offsets, appended as record_kind 'snapshot'.

    log_time holds the moment of the snapshot; commit_time, log coordinates and versions are null,
    because an offset fetch reports none of them.
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
    offsets = committed_offsets(librdkafka_conf(cfg.kafka, bootstrap), chosen, timeout)
    schema = (
        "group_id string, topic string, partition int, committed_offset long, leader_epoch int, "
        "metadata string, log_time_ms long"
    )
    df = spark.createDataFrame([(*o, now_ms) for o in offsets], schema)
    # A few fetched rows, appended through Spark whatever the decode route: the Spark engine asked for.
    store.group_commits.on(SPARK).append(snapshot_to_group_commits(df, rid))
    log.info("ingest %s: %d committed offsets of %d groups recorded", rid, len(offsets), len(chosen))
    result = IngestResult(rid, "snapshot", tuple(chosen))
    result.total = {"read": len(offsets), "decoded": len(offsets), "quarantined": 0}
    result.inserted = {GROUP_COMMITS: len(offsets)}
    return result
