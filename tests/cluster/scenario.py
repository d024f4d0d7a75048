"""A small audit scenario written as Delta tables by delta-rs on local disk, and copied file by file to
object storage: both copies are the same tables, byte for byte, so a reconcile over either must find
the same things.

One job reads four partitions of `orders` in one run with two checkpoints, each committed. The sink
lacks offsets 200..249 of partition 1 (a GAP), holds 100..109 of partition 2 twice (a DUPLICATE) and
has five records of partition 3 beyond the last checkpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from app.contracts.offsets import EventSource, LedgerEvent
from app.contracts.tables import GROUP_COMMITS_SCHEMA, LEDGER_SCHEMA, SINK_SCHEMA

JOB = "orders-audit"
GROUP = "orders-group"
TOPIC = "orders"
RUN = "run-1"
PARTITIONS = (0, 1, 2, 3)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UNTIL = T0 + timedelta(hours=1)  # the reconcile window's end, pinned
CHECKPOINTS = {1: 500, 2: 1000}  # checkpoint id -> next offset of every partition


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ledger_events() -> list[LedgerEvent]:
    def events(
        event_type: str, t: float, cp: int | None, offset: int | None, **detail: Any
    ) -> list[LedgerEvent]:
        writer = EventSource(JOB, RUN, "spark", GROUP)
        if offset is None:
            return [writer.event(event_type, at(t), cp, detail)]
        return writer.partition_events(
            event_type, at(t), cp, {(TOPIC, p): offset for p in PARTITIONS}, detail
        )

    out = events("RUN_STARTED", 0, None, None, startup_mode="earliest")
    out += events("OFFSETS_RESTORED", 0, None, 0, source="earliest")
    for cp, offset in CHECKPOINTS.items():
        t = cp * 10.0
        out += events("CHECKPOINT_SNAPSHOT", t, cp, offset)
        out += events("CHECKPOINT_COMPLETED", t + 1, cp, offset)
        out += events("COMMIT_REQUESTED", t + 1, cp, offset, attempt=cp)
        out += events("COMMIT_SUCCEEDED", t + 2, cp, offset, attempt=cp)
    out += events("RUN_STOPPED", 40, None, None)
    return out


def group_commit_rows() -> list[dict[str, Any]]:
    rows = []
    log_offset = 0
    for cp, offset in CHECKPOINTS.items():
        for p in PARTITIONS:
            when = at(cp * 10.0 + 2)
            rows.append(
                dict(
                    group_id=GROUP, topic=TOPIC, partition=p, committed_offset=offset, leader_epoch=None,
                    metadata="", commit_time=when, expire_time=None, record_kind="commit", value_version=3,
                    transactional=False, log_partition=0, log_offset=log_offset, log_time=when,
                    ingest_run_id="ingest-1",
                )
            )  # fmt: skip
            log_offset += 1
    return rows


def sink_rows(partition: int, offsets: range | list[int]) -> list[dict[str, Any]]:
    return [
        dict(kafka_topic=TOPIC, kafka_partition=partition, kafka_offset=o, kafka_timestamp=None,
             _checkpoint_id=2 if o >= 500 else 1, _run_id=RUN, key=None, value=b"x")
        for o in offsets
    ]  # fmt: skip


def sink_files() -> list[list[dict[str, Any]]]:
    """One append (so one data file) per group: the sink scan runs several tasks."""
    return [
        sink_rows(0, range(1000)),
        sink_rows(1, [o for o in range(1000) if not 200 <= o < 250]),
        sink_rows(2, range(1000)),
        sink_rows(2, range(100, 110)),
        sink_rows(3, range(1005)),
    ]


def _arrow(schema: StructType, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=to_arrow_schema(schema))


def write_scenario(data_dir: Path) -> None:
    """The scenario's ledger, group_commits and sink under ``data_dir``/tables (the default names)."""
    tables = data_dir / "tables"
    write_deltalake(
        str(tables / "ledger"),
        _arrow(LEDGER_SCHEMA, [e.to_row() for e in ledger_events()]),
        partition_by=["event_date"],
        configuration={"delta.appendOnly": "true"},
    )
    write_deltalake(str(tables / "group_commits"), _arrow(GROUP_COMMITS_SCHEMA, group_commit_rows()))
    for rows in sink_files():
        write_deltalake(str(tables / "sink"), _arrow(SINK_SCHEMA, rows), mode="append")


def upload_tree(local_dir: Path, s3_client: Any, bucket: str, prefix: str) -> int:
    """Every file under ``local_dir`` to s3://bucket/prefix/<relative path>; returns the file count."""
    files = sorted(p for p in local_dir.rglob("*") if p.is_file())
    for path in files:
        s3_client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local_dir).as_posix()}")
    return len(files)


def download_tree(s3_client: Any, bucket: str, prefix: str, local_dir: Path) -> int:
    """Every object under s3://bucket/prefix/ to ``local_dir``/<relative key>; returns the file count."""
    count = 0
    for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            target = local_dir / obj["Key"].removeprefix(f"{prefix}/")
            target.parent.mkdir(parents=True, exist_ok=True)
            s3_client.download_file(bucket, obj["Key"], str(target))
            count += 1
    return count
