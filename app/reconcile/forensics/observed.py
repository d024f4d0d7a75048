"""What the sink holds in the ranges restarts replayed or skipped: the offsets present and the copies
beyond the first, per restart and partition (``restarts.Observed``), for the restarts table and the
RESTART_* findings. Only those ranges of a `coordinates` sink are read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.reconcile.forensics.restarts import restart_ranges
from app.reconcile.sink.coordinates import SinkReader

RESTART_RANGES_DDL: Final = (
    "job_name string, run_id string, topic string, partition int, range_start long, range_end long"
)


def observed_in_restart_ranges(
    spark: SparkSession, sink: SinkReader, restarts: Sequence[Mapping[str, Any]]
) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """Per restart and partition: offsets present and duplicate copies the sink holds in the range
    the restart replayed or skipped. Only those ranges are read; no range, no read."""
    ranges = restart_ranges(restarts)
    if not ranges:
        return {}
    copies = (
        sink.where([(r["topic"], r["partition"], r["range_start"], r["range_end"]) for r in ranges])
        .groupBy("topic", "partition", "offset")
        .agg(F.count("*").alias("_copies"))
    )
    rdf = spark.createDataFrame(ranges, RESTART_RANGES_DDL)
    joined = rdf.join(
        copies,
        on=(rdf["topic"] == copies["topic"])
        & (rdf["partition"] == copies["partition"])
        & (copies["offset"] >= rdf["range_start"])
        & (copies["offset"] < rdf["range_end"]),
        how="left",
    )
    rows = joined.groupBy(rdf["job_name"], rdf["run_id"], rdf["topic"], rdf["partition"]).agg(
        F.coalesce(F.sum(copies["_copies"] - 1), F.lit(0)).cast("long").alias("duplicates_observed"),
        F.count(copies["offset"]).alias("present_offsets"),
    )
    return {(r["job_name"], r["run_id"], r["topic"], r["partition"]): r.asDict() for r in rows.collect()}
