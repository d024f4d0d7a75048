"""The JVM decoder of `__consumer_offsets`: the common records as Spark SQL expressions, the rest
routed to the Python decoder (``app.offsets_topic.ingest.decode_in_python``); ``decode`` is both."""

from __future__ import annotations

from collections.abc import Collection

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.contracts.tables import (
    require_columns,
)
from app.offsets_topic.decoder import (
    OFFSET_COMMIT_KEY_TYPES,
)
from app.offsets_topic.ingest import (
    DECODED_SCHEMA,
    KAFKA_INPUT_COLUMNS,
    KIND_COMMIT,
    KIND_OTHER_GROUP,
    KIND_ROUTED,
    KIND_SKIPPED,
    KIND_TOMBSTONE,
    decode_in_python,
)

# Nearly every record of a busy `__consumer_offsets` is an offset commit (key type 0/1, value v0-v4 with
# short metadata and no tagged fields), a tombstone, a record type the audit skips, or a record of a group
# that is not audited. Those are decoded here with byte arithmetic over the binary key and value, inside
# whole-stage codegen: no row crosses into a Python worker. Anything else (group metadata, long metadata,
# tagged fields, truncated or corrupt bytes, invalid UTF-8) is routed to the Python decoder, which is
# complete and authoritative. The routing is conservative: a record is decoded here only when its layout
# is exactly the one `fast_commit_row` accepts, and tests hold both paths to identical rows.
_JVM_KIND = "_jvm_kind"  # helper column: the kind decided in the JVM, null = route to Python


def _uint(hex_col: str, byte_at: Column | int, n: int) -> Column:
    """Unsigned big-endian integer of `n` <= 7 bytes at 0-based `byte_at` of a hex-encoded binary."""
    at = byte_at if isinstance(byte_at, Column) else F.lit(byte_at)
    return F.conv(F.substring(F.col(hex_col), at * 2 + 1, F.lit(2 * n)), 16, 10).cast("long")


def _signed(unsigned: Column, bits: int) -> Column:
    """The low `bits` (16 or 32) of a non-negative long, read as a two's complement int."""
    half = 1 << (bits - 1)
    return (F.pmod(unsigned + half, F.lit(1 << bits)) - half).cast("int")


def _int16(hex_col: str, byte_at: Column | int) -> Column:
    return _signed(_uint(hex_col, byte_at, 2), 16)


def _int32(hex_col: str, byte_at: Column | int) -> Column:
    return _signed(_uint(hex_col, byte_at, 4), 32)


def _int64(hex_col: str, byte_at: Column | int) -> Column:
    at = byte_at if isinstance(byte_at, Column) else F.lit(byte_at)
    # A negative target base makes conv read the 64 bits as a signed number.
    return F.conv(F.substring(F.col(hex_col), at * 2 + 1, F.lit(16)), 16, -10).cast("long")


def _staged(df: DataFrame, stages: list[dict[str, Column]]) -> DataFrame:
    """One projection per stage, each reading the helper columns of the stages before it: every field
    is computed once per row and the generated code stays small."""
    for stage in stages:
        df = df.withColumns(stage)
    return df


def _route(kafka_df: DataFrame, groups: Collection[str]) -> DataFrame:
    """Kafka source rows plus `_JVM_KIND` (the kind the JVM decodes the record as, or null) and the
    `_d_*` helper columns the JVM decoder reads its fields from."""
    require_columns(kafka_df, KAFKA_INPUT_COLUMNS, "kafka source")
    c = F.col
    key, value = c("key"), c("value")
    wanted = sorted(g.encode("utf-8") for g in groups)
    stages: list[dict[str, Column]] = [
        {
            "_d_kh": F.hex(key),
            "_d_vh": F.hex(value),
            "_d_kl": F.octet_length(key),
            "_d_vl": F.octet_length(value),
        },
        # conv over the hex string is the costly step per field, so neighbouring fields share one:
        # the key's first 4 bytes, and the value's bytes 10-15 (every valid offset commit value is
        # longer than that; a shorter one is routed to Python).
        {
            "_d_k4": F.when(c("_d_kl") >= 4, _uint("_d_kh", 0, 4)),
            "_d_v10": F.when(c("_d_vl") >= 16, _uint("_d_vh", 10, 6)),
        },
        # Keys of types 0, 1 and 2: int16 type, int16 group length, group; types 0/1 go on with int16
        # topic length, topic, int32 partition, and nothing after it.
        {
            "_d_type": F.when(c("_d_kl") >= 4, _signed(F.shiftright(c("_d_k4"), 16), 16)).when(
                c("_d_kl") >= 2, _int16("_d_kh", 0)
            ),
            "_d_glen": _signed(c("_d_k4"), 16),
            "_d_ver": F.when(c("_d_vl") >= 2, _int16("_d_vh", 0)),
        },
        {
            "_d_has_group": F.coalesce((c("_d_glen") >= 0) & (c("_d_kl") >= c("_d_glen") + 4), F.lit(False)),
            "_d_tlen": F.when(
                (c("_d_glen") >= 0) & (c("_d_kl") >= c("_d_glen") + 6), _int16("_d_kh", c("_d_glen") + 4)
            ),
            # Offset commit values (the layouts `fast_commit_row` accepts): v0-v2 offset, metadata, commit
            # ts [v1: expire ts]; v3 offset, epoch, metadata, commit ts; v4+ the same with a compact
            # metadata string (one-byte uvarint length) and no tagged fields.
            # The metadata length: bytes 10-11 (v0-v2), 14-15 (v3) or byte 14 (v4+) of the value.
            "_d_mlen": F.when(c("_d_ver") < 0, None)
            .when(c("_d_ver") <= 2, _signed(F.shiftright(c("_d_v10"), 32), 16))
            .when(c("_d_ver") == 3, _signed(c("_d_v10"), 16))
            .otherwise((F.shiftright(c("_d_v10"), 8) % 256).cast("int") - 1),
            "_d_mat": F.when(c("_d_ver") <= 2, 12).when(c("_d_ver") == 3, 16).otherwise(15),
            "_d_tail": F.when(c("_d_ver") == 1, 16).when(c("_d_ver") >= 4, 9).otherwise(8),
        },
        {
            "_d_key_ok": F.coalesce(
                c("_d_has_group") & (c("_d_tlen") >= 0) & (c("_d_kl") == c("_d_glen") + c("_d_tlen") + 10),
                F.lit(False),
            ),
            "_d_value_ok": F.coalesce(
                (c("_d_mlen") >= 0)
                & (c("_d_vl") == c("_d_mat") + c("_d_mlen") + c("_d_tail"))
                & ((c("_d_ver") < 4) | ((c("_d_mlen") < 0x7F) & (_uint("_d_vh", c("_d_vl") - 1, 1) == 0))),
                F.lit(False),
            ),
            "_d_group_raw": F.when(c("_d_has_group"), F.substring(key, F.lit(5), c("_d_glen"))),
        },
        {
            "_d_group": c("_d_group_raw").cast("string"),
            "_d_topic": F.when(
                c("_d_key_ok"), F.substring(key, c("_d_glen") + 7, c("_d_tlen")).cast("string")
            ),
            "_d_metadata": F.when(
                c("_d_value_ok"), F.substring(value, c("_d_mat") + 1, c("_d_mlen")).cast("string")
            ),
        },
        {
            # The never-true first branch makes the kind non-deterministic for the optimizer, which then
            # never pushes the filters on `_JVM_KIND` below this projection: pushed down, they would
            # inline every helper expression into one huge tree evaluated per row.
            _JVM_KIND: F.when(F.spark_partition_id() < 0, None)
            .when(key.isNull() | (c("_d_kl") < 2), None)
            .when(~c("_d_type").isin(0, 1, 2), KIND_SKIPPED)
            .when(
                F.lit(bool(wanted)) & c("_d_has_group") & ~c("_d_group_raw").isin(*wanted)
                if wanted
                else F.lit(False),
                KIND_OTHER_GROUP,
            )
            .when(
                c("_d_type").isin(*OFFSET_COMMIT_KEY_TYPES)
                & c("_d_key_ok")
                & F.is_valid_utf8(c("_d_group"))
                & F.is_valid_utf8(c("_d_topic"))
                & value.isNull(),
                KIND_TOMBSTONE,
            )
            .when(
                c("_d_type").isin(*OFFSET_COMMIT_KEY_TYPES)
                & c("_d_key_ok")
                & c("_d_value_ok")
                & F.is_valid_utf8(c("_d_group"))
                & F.is_valid_utf8(c("_d_topic"))
                & F.is_valid_utf8(c("_d_metadata")),
                KIND_COMMIT,
            )
        },
    ]
    return _staged(kafka_df.select(*KAFKA_INPUT_COLUMNS), stages)


def decode_or_route(kafka_df: DataFrame, groups: Collection[str] = ()) -> DataFrame:
    """Kafka source rows -> DECODED_SCHEMA rows, exactly one per record, in one pass over the source:
    the records the JVM decodes are final; the others come out as kind KIND_ROUTED with their raw
    key and value, for `decode_routed`. Nothing else is decoded from them here."""
    routed = _route(kafka_df, groups)
    c = F.col
    kind = F.coalesce(c(_JVM_KIND), F.lit(KIND_ROUTED))
    commit = kind == KIND_COMMIT
    keyed = kind.isin(KIND_COMMIT, KIND_TOMBSTONE)
    to_python = kind == KIND_ROUTED
    rows = _staged(
        routed,
        [
            {
                "_d_epoch": F.when(commit & (c("_d_ver") >= 3), _signed(F.shiftright(c("_d_v10"), 16), 32)),
                "_d_expire": F.when(
                    commit & (c("_d_ver") == 1), _int64("_d_vh", c("_d_mat") + c("_d_mlen") + 8)
                ),
            }
        ],
    )
    parsed = {
        "record_type": F.when(~to_python, c("_d_type")),
        "kind": kind,
        "group_id": F.when(keyed, c("_d_group")),
        "topic": F.when(keyed, c("_d_topic")),
        "partition": F.when(keyed, _int32("_d_kh", c("_d_glen") + c("_d_tlen") + 6)),
        "committed_offset": F.when(commit, _int64("_d_vh", 2)),
        "leader_epoch": F.when(c("_d_epoch") != -1, c("_d_epoch")),
        "metadata": F.when(commit, c("_d_metadata")),
        "commit_time_ms": F.when(commit, _int64("_d_vh", c("_d_mat") + c("_d_mlen"))),
        "expire_time_ms": F.when(c("_d_expire") != -1, c("_d_expire")),
        "value_version": F.when(commit, c("_d_ver")),
        "raw_key": F.when(to_python, c("key")),
        "raw_value": F.when(to_python, c("value")),
        "log_partition": c("partition"),
        "log_offset": c("offset"),
        "log_time": c("timestamp"),
    }
    return rows.select(
        *[
            (
                parsed[f.name]
                if f.name.startswith("log_") or f.name == "kind"
                else parsed.get(f.name, F.lit(None)).cast(f.dataType)
            ).alias(f.name)
            for f in DECODED_SCHEMA.fields
        ]
    )


def decode_routed(staged: DataFrame, groups: Collection[str] = ()) -> DataFrame:
    """The KIND_ROUTED rows of `decode_or_route` through the complete Python decoder: DECODED_SCHEMA
    rows, one per routed record, none of them routed."""
    require_columns(staged, DECODED_SCHEMA.fieldNames(), "decoded records")
    c = F.col
    as_source = staged.where(c("kind") == KIND_ROUTED).select(
        c("log_partition").alias("partition"),
        c("log_offset").alias("offset"),
        c("log_time").alias("timestamp"),
        c("raw_key").alias("key"),
        c("raw_value").alias("value"),
    )
    return decode_in_python(as_source, groups)


def decode_in_jvm(kafka_df: DataFrame, groups: Collection[str] = ()) -> DataFrame:
    """DECODED_SCHEMA rows of the records the JVM decodes; the others are left out (see `decode`)."""
    return decode_or_route(kafka_df, groups).where(F.col("kind") != KIND_ROUTED)


def decode(kafka_df: DataFrame, groups: Collection[str] = ()) -> DataFrame:
    """Kafka source rows -> DECODED_SCHEMA rows, exactly one per record: the common records decoded in
    the JVM, the rest by the Python decoder on the executors.

    As a plain plan this reads the source twice (once per branch of the union); the ingest stages
    `decode_or_route` instead and reads Kafka once (app/offsets_topic/ingest_io.py)."""
    staged = decode_or_route(kafka_df, groups)
    return staged.where(F.col("kind") != KIND_ROUTED).unionByName(decode_routed(staged, groups))
