"""The driver route of `ingest-offsets`, which `app.routes.decode_route` picks when Spark runs local:
the plan's ranges read by one confluent-kafka consumer in this process, decoded there by the record
decoder (app/offsets_topic/row_decoder.py), turned into table rows by the table rules
(app/offsets_topic/table_rows.py), which Spark's route runs too, and appended by delta-rs.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Collection, Iterator, Sequence

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql import SparkSession

from app.config import AppConfig
from app.errors import KafkaUnavailableError
from app.kafka.clients import CONSUME_WAIT_S, is_retriable, range_reader_conf
from app.offsets_topic.plan import IngestPlan
from app.offsets_topic.progress import PartitionProgress, ProgressRow, progress_rows, summarize_progress
from app.offsets_topic.ranges import PartitionRange
from app.offsets_topic.row_decoder import cyclic_gc_paused, epoch_ms_times, make_record_decoder
from app.offsets_topic.table_rows import TABLE_RULES
from app.offsets_topic.tables import (
    DATA_TABLES,
    DECODE_ERRORS,
    GROUP_COMMITS,
    GROUP_EVENTS,
    INGEST_TXN_APP_ID,
    TABLE_KINDS,
)
from app.routes import DRIVER
from app.storage.handles import AuditTables

log = logging.getLogger(__name__)

_CONSUME_BATCH = 20_000  # records per consume() call: large enough that per-call costs vanish
_PROGRESS_EVERY_S = 30.0  # a long read says how far it is, as Spark's progress bar would
# librdkafka's defaults fetch at most 1 MB per partition per request, which leaves the decoder waiting
# for the fetcher; a bulk read of the whole topic wants larger fetches and a deeper queue. Config
# (kafka.client, kafka.librdkafka) overrides them.
_FETCH_DEFAULTS = {
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
}
RawRecords = tuple[list[int], list[int], list[int], list[bytes | None], list[bytes | None]]


def consume_ranges(
    cfg: AppConfig, bootstrap: str, topic: str, ranges: Sequence[PartitionRange]
) -> Iterator[RawRecords]:
    """The records of `ranges` (committed records only), as (partitions, offsets, timestamps ms, keys,
    values) per consume() call, each partition in log order, stopping at each range's end.

    read_committed hides aborted records and transaction markers, so the offsets delivered may stop
    short of a range's end: a partition is done at the first record at or beyond its end, or when the
    consumer reports the end of what is committed (partition EOF), which is at or beyond the planned end
    (`log_end` is the last stable offset when the run was planned). Retriable errors are left to
    librdkafka, which retries them itself; when nothing arrives for kafka.request_timeout_s the read
    fails with KafkaUnavailableError, as any other Kafka request of the run.
    """
    ends = {r.partition: r.end for r in ranges if r.size > 0}
    if not ends:
        return
    total = sum(r.size for r in ranges if r.size > 0)
    timeout = cfg.kafka.request_timeout_s
    conf = range_reader_conf(
        cfg.kafka,
        bootstrap,
        "offset-audit-ingest-offsets",
        # A range start that retention removed meanwhile is an error, never a silent jump.
        offset_reset="error",
        defaults=_FETCH_DEFAULTS,
    )
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, r.partition, r.start) for r in ranges if r.size > 0])
        read, last_answer = 0, time.monotonic()
        last_log, last_error = last_answer, "no record"
        while ends:
            parts: list[int] = []
            offsets: list[int] = []
            times: list[int] = []
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            done: set[int] = set()
            messages = consumer.consume(_CONSUME_BATCH, timeout=CONSUME_WAIT_S)
            for m in messages:
                error = m.error()
                p = m.partition()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if p is not None and p in ends and (m.offset() or 0) >= ends[p]:
                            done.add(p)
                        continue
                    if is_retriable(error):
                        last_error = f"{error.name()}: {error.str()}"
                        continue
                    raise KafkaUnavailableError(f"reading {topic}-{p} failed: {error.name()} ({error.str()})")
                offset = m.offset()
                if p is None or offset is None or p not in ends or p in done:
                    continue
                if offset >= ends[p]:
                    done.add(p)
                    continue
                end = ends[p]
                parts.append(p)
                offsets.append(offset)
                times.append(m.timestamp()[1])
                keys.append(m.key())
                values.append(m.value())
                if offset + 1 >= end:
                    done.add(p)
            now = time.monotonic()
            if messages:
                last_answer = now
            elif now - last_answer > timeout:
                raise KafkaUnavailableError(
                    f"reading {topic} partitions {sorted(ends)}: no record within {timeout:.0f}s "
                    f"(last: {last_error})"
                )
            if done:
                consumer.pause([TopicPartition(topic, p) for p in done])  # fetch no further
                for p in done:
                    ends.pop(p, None)
            if keys:
                read += len(keys)
                yield parts, offsets, times, keys, values
            if now - last_log >= _PROGRESS_EVERY_S:
                last_log = now
                log.info("%s: read %d of at most %d records (%.0f%%)", topic, read, total, 100 * read / total)
    finally:
        consumer.close()


def write_decoded_on_driver(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    plan: IngestPlan,
    store: AuditTables,
    tables: Collection[str] = DATA_TABLES,
) -> tuple[list[PartitionProgress], dict[str, int]]:
    """The driver route of `run.write_decoded`: the plan's ranges read by one consumer and decoded in
    this process, each table appended by delta-rs in one commit under the same idempotent transaction
    id (app id INGEST_TXN_APP_ID, version = seq) and run marker as the Spark route's appends, so a
    pending run is finished the same way whichever route wrote its first tables.

    group_commits, nearly every record, streams to its Parquet writer as the records are decoded: the
    driver never holds the run in memory. group_events and decode_errors (few rows) are kept and
    appended after it. A table with no rows of this run gets no commit, as on the Spark route.
    """
    decode = make_record_decoder(plan.groups)
    counts: list[ProgressRow] = []
    kept: dict[str, list[pa.RecordBatch]] = {GROUP_EVENTS: [], DECODE_ERRORS: []}
    failure: list[BaseException] = []

    def commits() -> Iterator[pa.RecordBatch]:
        try:
            for parts, offsets, times, keys, values in consume_ranges(
                cfg, bootstrap, plan.topic, plan.to_read
            ):
                decoded = decode(
                    pa.array(parts, pa.int32()), pa.array(offsets, pa.int64()), epoch_ms_times(times),
                    keys, values,
                )  # fmt: skip
                counts.extend(progress_rows(decoded))
                for name in (GROUP_EVENTS, DECODE_ERRORS):
                    rows = TABLE_RULES[name](decoded, plan.run_id)
                    if rows.num_rows:
                        kept[name].append(rows)
                rows = TABLE_RULES[GROUP_COMMITS](decoded, plan.run_id)
                if rows.num_rows:
                    yield rows
        except BaseException as exc:
            failure.append(exc)  # raised again as it is, not as the writer's wrapping of it
            raise

    marker = plan.marker()
    stream = commits()
    with cyclic_gc_paused():
        first = next(stream, None)  # the read's first commits, or the whole read when it has none
        to_write = {GROUP_COMMITS: [] if first is None else itertools.chain([first], stream), **kept}
        for name in DATA_TABLES:  # group_commits first: the others are complete only once it is read
            table, batches = store.named(name).on(DRIVER), to_write[name]
            try:
                if name in tables and (first is not None if name == GROUP_COMMITS else batches):
                    table.append_once(batches, INGEST_TXN_APP_ID, plan.seq, marker)
                else:
                    table.ensure()  # created for its readers, as today
            except Exception:
                if failure:
                    raise failure[0] from None
                raise
            if name == GROUP_COMMITS:
                for _ in stream:  # what the write skipped (already committed, not wanted) is still counted
                    pass
    inserted = {
        name: sum(n for _, kind, _, n, _ in counts if kind in wanted) if name in tables else 0
        for name, wanted in TABLE_KINDS.items()
    }
    return summarize_progress(counts), inserted
