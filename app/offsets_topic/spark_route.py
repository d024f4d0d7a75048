"""The Spark route of `ingest-offsets`, which `app.routes.decode_route` picks on a cluster: the plan's
ranges read by Spark's Kafka source, decoded on the executors, appended to Delta through Spark.

The executors run the driver route's functions, through `DataFrame.mapInArrow`: the record decoder
(app/offsets_topic/row_decoder.py) turns the Kafka source's batches into decoded batches, one row per
record; the table rules (app/offsets_topic/table_rows.py) turn those into each table's rows, and the
progress counts (app/offsets_topic/progress.py) are taken from the same decoded rows. Each rule is
written once, whichever route runs it.

Kafka is read once: the decoded rows are persisted while the counts are taken (that one action reads
Kafka and decodes every record), and every append after it reads the cache. A recomputation after an
eviction is still correct: the ranges are fixed offsets.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig
from app.contracts.tables import require_columns
from app.errors import InfrastructureError, KafkaUnavailableError
from app.kafka.clients import spark_kafka_options
from app.offsets_topic.decoded import DECODED_SCHEMA, KAFKA_INPUT_COLUMNS, TIME_MS_FIELDS
from app.offsets_topic.plan import IngestPlan
from app.offsets_topic.progress import (
    PROGRESS_SCHEMA,
    PartitionProgress,
    ProgressRow,
    progress_counts,
    summarize_progress,
)
from app.offsets_topic.ranges import PartitionRange, kafka_read_options
from app.offsets_topic.row_decoder import decode_kafka_batches
from app.offsets_topic.table_rows import TABLE_RULES, TableRule
from app.offsets_topic.tables import (
    DATA_TABLES,
    INGEST_TXN_APP_ID,
    TABLE_KINDS,
    TABLE_SCHEMAS,
)
from app.routes import SPARK
from app.storage.handles import AuditTables

log = logging.getLogger(__name__)

_DEPRECATED_OFFSET_FETCHING = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"


# --- the rules on the executors ------------------------------------------------------------------


def decode_on_executors(kafka_df: DataFrame, groups: Collection[str] = ()) -> DataFrame:
    """Kafka source rows -> DECODED_SCHEMA rows, exactly one per record, by the record decoder."""
    require_columns(kafka_df, KAFKA_INPUT_COLUMNS, "kafka source")
    return kafka_df.select(*KAFKA_INPUT_COLUMNS).mapInArrow(decode_kafka_batches(groups), DECODED_SCHEMA)


def _batches_through(
    rule: TableRule, run_id: str
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out = rule(batch, run_id)
            if out.num_rows:
                yield out

    return rows


def table_frame(decoded: DataFrame, table: str, run_id: str) -> DataFrame:
    """The rows of `table` (a data table, `tables.DATA_TABLES`) from decoded rows, by its table rule."""
    require_columns(decoded, DECODED_SCHEMA.fieldNames(), "decoded records")
    # Only the rows of the table's kinds cross into Python (the rule keeps exactly those too): group
    # events and decode errors are a handful among millions of commits.
    theirs = decoded.where(F.col("kind").isin(*TABLE_KINDS[table]))
    return theirs.mapInArrow(_batches_through(TABLE_RULES[table], run_id), TABLE_SCHEMAS[table])


def _counted(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield from progress_counts(batch).to_batches()


def count_progress(decoded: DataFrame) -> list[ProgressRow]:
    """The progress counts of decoded rows (a key per batch counted; `summarize_progress` adds them)."""
    columns = ("log_partition", "kind", "record_type", *TIME_MS_FIELDS)
    require_columns(decoded, columns, "decoded records")
    counts = decoded.select(*columns).mapInArrow(_counted, PROGRESS_SCHEMA).collect()
    return [(r.log_partition, r.kind, r.record_type, r.records, r.times_out_of_range) for r in counts]


@contextlib.contextmanager
def decoded_once(
    kafka_df: DataFrame, groups: Collection[str]
) -> Iterator[tuple[DataFrame, list[ProgressRow]]]:
    """The decoded records (DECODED_SCHEMA, one row per record) and their progress counts, with Kafka
    read and every record decoded once: the decoded rows are persisted while the counts are taken, and
    unpersisted on exit."""
    decoded = decode_on_executors(kafka_df, groups).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield decoded, count_progress(decoded)
    finally:
        decoded.unpersist()


# --- Kafka in, Delta out -------------------------------------------------------------------------


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


def _append_decoded(
    store: AuditTables,
    plan: IngestPlan,
    decoded: DataFrame,
    counts: Sequence[ProgressRow],
    tables: Collection[str],
) -> dict[str, int]:
    """Each of `tables` gets its kinds of `decoded` in one idempotent append; rows appended per table."""
    kinds = {kind for _, kind, _, n, _ in counts if n > 0}
    inserted = {}
    marker = plan.marker()
    for name in DATA_TABLES:
        table, wanted = store.named(name).on(SPARK), TABLE_KINDS[name]
        if name not in tables or kinds.isdisjoint(wanted):
            # decode_errors and, for offset-only committers, group_events are usually empty: no
            # commit for them. The table is still created for its readers.
            table.ensure()
            inserted[name] = 0
            continue
        # Under (INGEST_TXN_APP_ID, seq): Delta skips the append if `seq` is already committed.
        rows = table_frame(decoded, name, plan.run_id)
        table.append_once(rows, INGEST_TXN_APP_ID, plan.seq, marker)
        inserted[name] = sum(n for _, kind, _, n, _ in counts if kind in wanted)
    return inserted


def write_decoded_on_spark(
    spark: SparkSession,
    cfg: AppConfig,
    bootstrap: str,
    plan: IngestPlan,
    store: AuditTables,
    tables: Collection[str] = DATA_TABLES,
) -> tuple[list[PartitionProgress], dict[str, int]]:
    """The Spark route of `run.write_decoded`: the plan's ranges read by Spark's Kafka source and
    decoded on the executors, each of `tables` appended through Spark under the plan's seq."""
    # Spark's default Admin-based offset fetching lists topics without internal ones, so `assign` on
    # __consumer_offsets finds no partitions ("Assigned: Set()"); the consumer-based path sees them.
    # Set for this read only and restored after, as other jobs may share the session.
    previous = spark.conf.get(_DEPRECATED_OFFSET_FETCHING, None)
    spark.conf.set(_DEPRECATED_OFFSET_FETCHING, "true")
    try:
        kafka_df = read_offsets_topic(spark, cfg, bootstrap, plan.to_read)
        with decoded_once(kafka_df, plan.groups) as (decoded, counts):
            inserted = _append_decoded(store, plan, decoded, counts, tables)
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
