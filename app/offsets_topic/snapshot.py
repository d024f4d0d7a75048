"""Snapshot mode of `ingest-offsets` (config `ingest.mode: snapshot`), for where `__consumer_offsets`
may not be read: the groups' current committed offsets from the Admin API, appended to group_commits
as record_kind 'snapshot'. No history, tombstones or group metadata: the Admin API reports none.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig
from app.contracts.tables import GROUP_COMMITS_SCHEMA, conform, require_columns
from app.kafka.clients import admin_client, is_retriable, raise_partition_errors, retry_kafka
from app.offsets_topic.plan import Clock, IngestResult
from app.offsets_topic.tables import GROUP_COMMITS
from app.routes import SPARK
from app.storage.handles import AuditTables

log = logging.getLogger(__name__)

SNAPSHOT_INPUT_COLUMNS: Final = (
    "group_id", "topic", "partition", "committed_offset", "leader_epoch", "metadata", "log_time_ms",
)  # fmt: skip


def snapshot_to_group_commits(offsets: DataFrame, run_id: str) -> DataFrame:
    """Admin API committed offsets -> group_commits rows of record_kind 'snapshot'.

    log_time is when the snapshot was taken; what the Admin API does not report (commit time, log
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
    groups: Sequence[str],
    rid: str,
    clock: Clock,
    store: AuditTables,
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
    # A few Admin API rows, appended through Spark whatever the decode route: the Spark engine asked for.
    store.group_commits.on(SPARK).append(snapshot_to_group_commits(df, rid))
    log.info("ingest %s: %d committed offsets of %d groups recorded", rid, len(offsets), len(chosen))
    result = IngestResult(rid, "snapshot", tuple(chosen))
    result.total = {"read": len(offsets), "decoded": len(offsets), "quarantined": 0}
    result.inserted = {GROUP_COMMITS: len(offsets)}
    return result
