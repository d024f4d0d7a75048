"""Both routes of `ingest-offsets` give the same rows from the single rule: the driver route runs the
record decoder, the table rules and the progress counts in this process over a consumer's records; the
Spark route runs the same functions on the executors through `mapInArrow` over the Kafka source's rows.
For every kind of record, malformed (quarantined) ones included, the decoded rows, the group_commits,
group_events and decode_errors rows and the counts are equal, and the times a table cannot hold are null
on both."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts.instants import instant
from app.contracts.tables import DECODE_ERRORS_SCHEMA, GROUP_COMMITS_SCHEMA, GROUP_EVENTS_SCHEMA
from app.offsets_topic.decoded import DECODED_SCHEMA, TIME_MS_FIELDS, TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS
from app.offsets_topic.progress import progress_rows
from app.offsets_topic.row_decoder import epoch_ms_times, make_record_decoder
from app.offsets_topic.spark_route import decoded_once, table_frame
from app.offsets_topic.table_rows import TABLE_RULES
from app.offsets_topic.tables import DECODE_ERRORS, GROUP_COMMITS, GROUP_EVENTS
from tests.unit.offsets_records import AUDITED, MAX_MS, MIN_MS, RECORDS

pytestmark = pytest.mark.spark

CONTRACTS = {
    GROUP_COMMITS: GROUP_COMMITS_SCHEMA,
    GROUP_EVENTS: GROUP_EVENTS_SCHEMA,
    DECODE_ERRORS: DECODE_ERRORS_SCHEMA,
}


def per_key(counts: Iterable[Any]) -> Counter[tuple[Any, ...]]:
    """Records and records with a time out of range per (log_partition, kind, record_type), however
    many rows (one per batch counted) a key came in."""
    total: Counter[tuple[Any, ...]] = Counter()
    for partition, kind, record_type, n, odd_times in counts:
        total[(partition, kind, record_type, "records")] += n
        total[(partition, kind, record_type, "times_out_of_range")] += odd_times
    return total


def spark_rows(df: Any) -> list[dict[str, Any]]:
    """Rows as Arrow gives them on the driver: Spark's naive local times made UTC-aware."""
    return [{k: instant(v) for k, v in r.asDict().items()} for r in df.collect()]


def by_offset(rows: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["log_offset"]: r for r in rows}


def out_of_range(ms: int | None) -> bool:
    return ms is not None and not TIMESTAMP_MIN_MS <= ms <= TIMESTAMP_MAX_MS


def in_table(ms: int | None) -> datetime | None:
    """What a TIMESTAMP column of the ingest tables holds for an epoch-ms value: null outside the range."""
    if ms is None or out_of_range(ms):
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


@pytest.mark.parametrize("groups", [(), AUDITED], ids=["all-groups", "audited-groups"])
def test_both_routes_give_the_same_rows_tables_and_counts(
    spark: SparkSession, groups: tuple[str, ...]
) -> None:
    n = len(RECORDS)
    times_ms = [1_700_000_000_000 + 7 * i for i in range(n)]
    keys, values = [k for k, _ in RECORDS], [v for _, v in RECORDS]
    # The driver route: the consumer's records decoded in this process.
    on_driver = make_record_decoder(groups)(
        pa.array([7] * n, pa.int32()), pa.array(range(n), pa.int64()), epoch_ms_times(times_ms), keys, values
    )
    driver_rows = by_offset(on_driver.to_pylist())
    assert len(driver_rows) == n
    # The Spark route: the Kafka source's rows, in three partitions (so in several batches counted).
    source = [
        (7, i, datetime.fromtimestamp(ms / 1000, UTC), k, v)
        for i, ((k, v), ms) in enumerate(zip(RECORDS, times_ms, strict=True))
    ]
    schema = "partition int not null, offset long not null, timestamp timestamp, key binary, value binary"
    kafka_df = spark.createDataFrame(source, schema).repartition(3)
    with decoded_once(kafka_df, groups) as (on_spark, counts):
        assert on_spark.schema == DECODED_SCHEMA
        assert by_offset(spark_rows(on_spark)) == driver_rows, "one decoded row per record, the same"
        progress = per_key(progress_rows(on_driver))
        assert per_key(counts) == progress, "the same counts by partition, kind and record type"
        tables: dict[str, dict[int, dict[str, Any]]] = {}
        for table, contract in CONTRACTS.items():
            frame = table_frame(on_spark, table, "run-1")
            assert frame.schema == contract, "the contract's columns, types and nullability"
            got = TABLE_RULES[table](on_driver, "run-1")
            assert got.schema == to_arrow_schema(contract), table
            assert by_offset(spark_rows(frame)) == by_offset(got.to_pylist()), table
            assert got.num_rows, f"{table} has rows to compare"
            tables[table] = by_offset(got.to_pylist())
    # The records with a time their table cannot hold are counted alike, and keep their rows with that
    # time null; a time just inside the range is exact.
    odd = [o for o, r in driver_rows.items() if any(out_of_range(r[c]) for c in TIME_MS_FIELDS)]
    assert sum(k for key, k in progress.items() if key[3] == "times_out_of_range") == len(odd) > 0
    commits, events = tables[GROUP_COMMITS], tables[GROUP_EVENTS]
    assert set(commits) | set(events) >= set(odd)
    for offset, row in commits.items():
        assert row["commit_time"] == in_table(driver_rows[offset]["commit_time_ms"]), offset
        assert row["expire_time"] == in_table(driver_rows[offset]["expire_time_ms"]), offset
    for offset, row in events.items():
        assert row["state_time"] == in_table(driver_rows[offset]["state_time_ms"]), offset
    assert in_table(MAX_MS) in {r["commit_time"] for r in commits.values()}
    assert in_table(MIN_MS) in {r["expire_time"] for r in commits.values()}
    assert in_table(MAX_MS) in {r["state_time"] for r in events.values()}
