"""The decoders of `ingest-offsets` agree: every record kind decoded in the JVM (Spark SQL over the
binary key and value) gives the row the complete Python decoder gives, and what the JVM path does not
take is routed to Python, so the combined decode keeps exactly one row per record, also as the ingest
stages it (one read of the source, Python only over the routed records). The driver path (a Kafka
consumer's records decoded in the driver into Arrow) gives the same rows and the same table rows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts.instants import instant
from app.contracts.tables import DECODE_ERRORS_SCHEMA, GROUP_COMMITS_SCHEMA, GROUP_EVENTS_SCHEMA
from app.offsets_topic import driver_decode
from app.offsets_topic.ingest import (
    DECODED_SCHEMA,
    KIND_COMMIT,
    KIND_OTHER_GROUP,
    KIND_SKIPPED,
    KIND_TOMBSTONE,
    TIME_MS_FIELDS,
    TIMESTAMP_MAX_MS,
    TIMESTAMP_MIN_MS,
    decode_in_python,
    progress_counts,
    to_decode_errors,
    to_group_commits,
    to_group_events,
)
from app.offsets_topic.ingest_io import decoded_once
from app.offsets_topic.jvm_decode import decode, decode_in_jvm
from tests.unit.kafka_bytes import (
    Member,
    group_metadata_key,
    group_metadata_value,
    int16,
    offset_commit_key,
    offset_commit_value,
    string,
)

pytestmark = pytest.mark.spark

KEY = offset_commit_key("grüppe", "orders.v1", 2**31 - 1, record_type=0)
MAX_MS, MIN_MS = TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS
# Records the JVM path must decode itself: every commit key and value version, edge values, tombstones,
# record types the audit skips. The commit and expire timestamps (expire: v1 only) include both ends of
# the range a TIMESTAMP column holds, one step beyond each, and int64's own ends.
COMMON = [
    (
        offset_commit_key("g", "t", p, record_type=v % 2),
        offset_commit_value(v, off, md, ts, leader_epoch=e, expire_ts=x),
    )
    for v in (0, 1, 2, 3, 4, 5)
    for p, off, md, ts, e, x in [
        (0, 0, "", 0, -1, -1),
        (-1, 2**62, "checkpoint=17;ü", 1_700_000_000_123, 7, 1_800_000_000_000),
        (2**31 - 1, -1, "x" * 125, -5, 0, 0),
        (3, -(2**63), "m", 2**63 - 1, -(2**31), -(2**63)),
        (4, 5, "n", -(2**63), 1, 2**63 - 1),
        (5, 6, "in", MAX_MS, 2, MIN_MS),
        (6, 7, "in", MIN_MS, 3, MAX_MS),
        (7, 8, "out", MAX_MS + 1, 4, MIN_MS - 1),
        (8, 9, "out", MIN_MS - 1, 5, MAX_MS + 1),
    ]
] + [
    (KEY, None),
    (offset_commit_key("g", "", 0, record_type=1), None),
    (int16(4) + string("g"), b"\x00\x00"),
    (int16(-1), b""),
]  # fmt: skip
# Records the JVM path must leave to Python: group metadata, long metadata, tagged fields, malformed bytes.
MEMBER = Member("m-1", client_id="svc-a", client_host="/10.0.0.7", group_instance_id=None)
ROUTED = [
    (group_metadata_key("g"), group_metadata_value(3, "consumer", 7, "range", "m-1", [MEMBER], state_ts=9)),
    (group_metadata_key("g"), None),
    (group_metadata_key("g"), group_metadata_value(2, "consumer", 8, "range", "m-1", [], state_ts=MAX_MS)),
    (group_metadata_key("g"), group_metadata_value(2, "consumer", 9, "range", None, [], state_ts=2**63 - 1)),
    (KEY, offset_commit_value(4, 5, "y" * 200, 1)),  # two-byte compact length
    (KEY, offset_commit_value(4, 3, "m", 9, tags=[(0, bytes(16))])),  # topic id tag
    (KEY, offset_commit_value(3, 1)[:-1]),  # truncated value
    (KEY, offset_commit_value(3, 1) + b"\x00"),  # trailing byte
    (KEY, int16(-2) + bytes(30)),  # negative version
    (KEY[:-1], offset_commit_value(3, 1)),  # truncated key
    (KEY + b"\x00", None),  # trailing byte in a tombstone key
    (int16(1) + int16(2) + b"\xff\xfe" + string("t") + bytes(4), offset_commit_value(3, 1)),  # bad UTF-8
    (int16(1) + int16(3) + b"\xed\xa0\x80" + string("t") + bytes(4), None),  # a surrogate
    (int16(1) + int16(2) + b"\xc0\x80" + string("t") + bytes(4), None),  # overlong encoding
    (KEY, int16(3) + bytes(12) + int16(1) + b"\xf4\x90" + bytes(8)),  # beyond U+10FFFF (truncated)
    (b"\x00", b""),
    (None, b"v"),
]


def frame(spark: SparkSession, records: list[tuple[bytes | None, bytes | None]]) -> Any:
    rows = [(7, i, None, k, v) for i, (k, v) in enumerate(records)]
    schema = "partition int not null, offset long not null, timestamp timestamp, key binary, value binary"
    return spark.createDataFrame(rows, schema)


def per_key(counts: Iterable[Any]) -> Counter[tuple[Any, ...]]:
    """Records and records with a time out of range per (log_partition, kind, record_type), however
    many rows a key was counted in."""
    total: Counter[tuple[Any, ...]] = Counter()
    for partition, kind, record_type, n, odd_times in counts:
        total[(partition, kind, record_type, "records")] += n
        total[(partition, kind, record_type, "times_out_of_range")] += odd_times
    return total


def by_offset(df: Any) -> dict[int, Any]:
    return {r.log_offset: r.asDict() for r in df.collect()}


@pytest.mark.parametrize("groups", [(), ("g", "grüppe")], ids=["all-groups", "audited-groups"])
def test_jvm_and_python_decoders_give_identical_rows(spark: SparkSession, groups: tuple[str, ...]) -> None:
    others = [(offset_commit_key("other", "t", 0), b"garbage"), (group_metadata_key("other"), None)]
    records = COMMON + ROUTED + others
    df = frame(spark, records)
    python = by_offset(decode_in_python(df, groups))
    jvm = by_offset(decode_in_jvm(df, groups))
    assert len(python) == len(records)
    for offset, row in jvm.items():
        assert row == python[offset], f"record {offset}: {records[offset]!r}"
    common = set(range(len(COMMON)))
    assert common <= set(jvm), "every common record is decoded in the JVM"
    routed = set(range(len(COMMON), len(COMMON) + len(ROUTED)))
    # With audited groups, a record of another group is marked as such in the JVM, whatever its bytes.
    assert {o for o in set(jvm) & routed if jvm[o]["kind"] != KIND_OTHER_GROUP} == set(), "the rest: Python"
    assert {jvm[o]["kind"] for o in common} == {KIND_COMMIT, KIND_TOMBSTONE, KIND_SKIPPED}
    if groups:
        other_offsets = set(range(len(COMMON) + len(ROUTED), len(records)))
        assert {jvm[o]["kind"] for o in other_offsets} == {KIND_OTHER_GROUP}
    combined = decode(df, groups)
    assert combined.schema == DECODED_SCHEMA
    assert by_offset(combined) == python, "one row per record, each equal to the Python decoder's"
    with decoded_once(df, groups) as (once, counts):
        assert by_offset(once) == python, "the ingest's staged decode gives the same rows"
        expected = [tuple(r) for r in progress_counts(decode_in_python(df, groups)).collect()]
        assert per_key(counts) == per_key(expected), "and counts every record by kind"


def out_of_range(ms: int | None) -> bool:
    return ms is not None and not TIMESTAMP_MIN_MS <= ms <= TIMESTAMP_MAX_MS


def in_table(ms: int | None) -> datetime | None:
    """What a TIMESTAMP column of the ingest tables holds for an epoch-ms value: null outside the range."""
    if ms is None or out_of_range(ms):
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def spark_rows(df: Any) -> list[dict[str, Any]]:
    """Rows as the driver path's Arrow gives them: Spark's naive local times made UTC-aware."""
    return [{k: instant(v) for k, v in r.asDict().items()} for r in df.collect()]


@pytest.mark.parametrize("groups", [(), ("g", "grüppe")], ids=["all-groups", "audited-groups"])
def test_driver_decoder_gives_the_spark_paths_rows_and_tables(
    spark: SparkSession, groups: tuple[str, ...]
) -> None:
    """The driver path (records from a Kafka consumer, decoded in the driver, Arrow) gives for every
    record kind the row of the Spark SQL path and of the complete Python decoder, and the same
    group_commits, group_events and decode_errors rows, malformed (quarantined) records included."""
    others = [(offset_commit_key("other", "t", 0), b"garbage"), (group_metadata_key("other"), None)]
    records = COMMON + ROUTED + others
    times_ms = [1_700_000_000_000 + 7 * i for i in range(len(records))]
    rows = [
        (7, i, datetime.fromtimestamp(ms / 1000, UTC), k, v)
        for i, ((k, v), ms) in enumerate(zip(records, times_ms, strict=True))
    ]
    schema = "partition int not null, offset long not null, timestamp timestamp, key binary, value binary"
    df = spark.createDataFrame(rows, schema)
    keys, values = [k for k, _ in records], [v for _, v in records]
    decode_on_driver = driver_decode.make_record_decoder(groups)
    # Two calls: the second finds the commit keys already parsed (memoised), and must give the same.
    for _ in range(2):
        on_driver = decode_on_driver([7] * len(records), list(range(len(records))), times_ms, keys, values)
        python = {r["log_offset"]: r for r in spark_rows(decode_in_python(df, groups))}
        assert len(python) == len(records)
        assert {r["log_offset"]: r for r in on_driver.to_pylist()} == python
    combined = decode(df, groups)
    assert {r["log_offset"]: r for r in spark_rows(combined)} == python, "the Spark SQL path gives the same"
    progress = per_key(driver_decode.progress_rows(on_driver))
    assert progress == per_key(tuple(r) for r in progress_counts(decode_in_python(df, groups)).collect())
    # The records with a time their table cannot hold: both paths count them alike.
    odd = [o for o, r in python.items() if any(out_of_range(r[c]) for c in TIME_MS_FIELDS)]
    assert sum(n for k, n in progress.items() if k[3] == "times_out_of_range") == len(odd) > 0
    tables: dict[str, dict[int, dict[str, Any]]] = {}
    for to_spark, to_arrow, contract in [
        (to_group_commits, driver_decode.to_group_commits, GROUP_COMMITS_SCHEMA),
        (to_group_events, driver_decode.to_group_events, GROUP_EVENTS_SCHEMA),
        (to_decode_errors, driver_decode.to_decode_errors, DECODE_ERRORS_SCHEMA),
    ]:
        expected = spark_rows(to_spark(combined, "run-1"))
        got = to_arrow(on_driver, "run-1")
        on_spark = to_arrow_schema(to_spark(combined, "run-1").schema)
        assert [(f.name, f.type) for f in got.schema] == [(f.name, f.type) for f in on_spark]
        assert got.schema == to_arrow_schema(contract), "the contract's columns, types and nullability"
        assert sorted(got.to_pylist(), key=lambda r: r["log_offset"]) == sorted(
            expected, key=lambda r: r["log_offset"]
        ), to_spark.__name__
        assert expected, f"{to_spark.__name__} has rows to compare"
        tables[to_spark.__name__] = {r["log_offset"]: r for r in got.to_pylist()}
    # Every record keeps its row; a time beyond what a TIMESTAMP holds is null there, one just inside is
    # exact, on both paths (held equal above).
    commits, events = tables[to_group_commits.__name__], tables[to_group_events.__name__]
    assert set(commits) | set(events) >= set(odd)
    for offset, row in commits.items():
        assert row["commit_time"] == in_table(python[offset]["commit_time_ms"]), offset
        assert row["expire_time"] == in_table(python[offset]["expire_time_ms"]), offset
    for offset, row in events.items():
        assert row["state_time"] == in_table(python[offset]["state_time_ms"]), offset
    assert in_table(MAX_MS) in {r["commit_time"] for r in commits.values()}
    assert in_table(MIN_MS) in {r["expire_time"] for r in commits.values()}
    assert in_table(MAX_MS) in {r["state_time"] for r in events.values()}
