"""The decoded row of `__consumer_offsets`: one per record, whichever route decoded it (the driver's
consumer or Spark's executors, `app.routes.decode_route`). Its kinds, its schema (Spark's and Arrow's),
and the range of times the ingest tables hold. Shared by the decoder, the table rules and both routes.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# --- kinds of decoded rows -----------------------------------------------------------------------

KIND_COMMIT: Final = "commit"
KIND_TOMBSTONE: Final = "tombstone"
KIND_GROUP_METADATA: Final = "group_metadata"
KIND_GROUP_TOMBSTONE: Final = "group_tombstone"
KIND_SKIPPED: Final = "skipped"  # a record type the audit does not read (types 3+)
KIND_OTHER_GROUP: Final = "other_group"  # an offset/group record of a group that is not audited
KIND_ERROR: Final = "error"

# The Kafka source's columns the decoder needs on the Spark route; nothing else crosses into Python.
KAFKA_INPUT_COLUMNS: Final = ("partition", "offset", "timestamp", "key", "value")

# One wide row per record. Times stay epoch milliseconds here, as the bytes hold them: the table rules
# (app/offsets_topic/table_rows.py) make them timestamps, null where a table cannot hold them.
DECODED_SCHEMA: Final = StructType(
    [
        StructField("log_partition", IntegerType(), False),
        StructField("log_offset", LongType(), False),
        StructField("log_time", TimestampType(), True),
        StructField("kind", StringType(), False),
        StructField("record_type", IntegerType(), True),
        StructField("group_id", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("committed_offset", LongType(), True),
        StructField("leader_epoch", IntegerType(), True),
        StructField("metadata", StringType(), True),
        StructField("commit_time_ms", LongType(), True),
        StructField("expire_time_ms", LongType(), True),
        StructField("value_version", IntegerType(), True),
        StructField("protocol_type", StringType(), True),
        StructField("generation", IntegerType(), True),
        StructField("protocol", StringType(), True),
        StructField("leader", StringType(), True),
        StructField("state_time_ms", LongType(), True),
        StructField("members", StringType(), True),
        StructField("reason", StringType(), True),
        StructField("raw_key", BinaryType(), True),
        StructField("raw_value", BinaryType(), True),
    ]
)

# Columns filled by the record decoder, in DECODED_SCHEMA order (the first three are the log coordinates).
DECODED_FIELDS: Final = tuple(f.name for f in DECODED_SCHEMA.fields[3:])
ARROW_DECODED_SCHEMA: Final = to_arrow_schema(DECODED_SCHEMA)

# --- the times a table holds ---------------------------------------------------------------------

# The epoch-millisecond range the ingest tables' TIMESTAMP columns take, on both routes. A commit
# value's commit and expire timestamps are what the committing client sent (old OffsetCommit versions
# let it choose), so any int64 can arrive. Spark's TIMESTAMP and Arrow's timestamp[us]
# hold microseconds in an int64 (|ms| <= 9_223_372_036_854_775; beyond it both fail the whole run), but
# Spark writes Parquet timestamps as INT96, which delta-rs and Arrow read back as nanoseconds in an
# int64: a Spark-written time outside 1677-09-21..2262-04-11 makes every driver-side reader of the table
# (reconcile, quality) fail. The range is therefore the nanosecond one, which every writer and reader
# here holds; no real commit time lies outside it. A time outside it is stored as null, its row is
# kept (the committed offset is what the audit needs), and the record is counted in
# `PartitionProgress.times_out_of_range`, which the run reports as a warning.
TIMESTAMP_MAX_MS: Final = (2**63 - 1) // 1_000_000  # 2262-04-11T23:47:16.854Z
TIMESTAMP_MIN_MS: Final = -TIMESTAMP_MAX_MS  # 1677-09-21T00:12:43.146Z
# The decoded epoch-ms fields that become TIMESTAMP columns (group_commits, group_events).
TIME_MS_FIELDS: Final = ("commit_time_ms", "expire_time_ms", "state_time_ms")
