"""The per-bucket examination rule over Arrow rows, without a JVM: what it says of one group, and
that running it over every group at once (the driver) equals running it over fewer whole groups at
a time (a Spark task; tests/spark/test_reconcile.py runs that route)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pyarrow as pa
import pytest

from app.reconcile.sink.buckets import (
    EXAMINED_SCHEMA,
    examine_buckets,
    joined_runs,
    partitions_examined,
    writers_json,
)
from app.reconcile.sink.offsets import BUCKET_SIZE, BucketStat, bitmap_offsets
from app.routes import examine_tasks

pytestmark = pytest.mark.unit

Row = tuple[str, int, int, int | None, str | None]  # topic, partition, offset, checkpoint, run


def sink(rows: Sequence[Row]) -> pa.Table:
    """Rows in the canonical sink columns, as SinkReader hands them over."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * 5
    return pa.table(
        {
            "topic": pa.array(columns[0], pa.string()),
            "partition": pa.array(columns[1], pa.int32()),
            "offset": pa.array(columns[2], pa.int64()),
            "writer_checkpoint_id": pa.array(columns[3], pa.int64()),
            "writer_run_id": pa.array(columns[4], pa.string()),
        }
    )


def test_no_rows_give_no_bucket() -> None:
    assert examine_buckets(sink([])) == EXAMINED_SCHEMA.empty_table()


def test_one_row_per_bucket_with_its_statistics_and_the_words_of_incomplete_buckets_only() -> None:
    full = [("t", 0, o, 1, "r") for o in range(BUCKET_SIZE, 2 * BUCKET_SIZE)]
    # bucket 0: offsets 0, 63, 64 and 65 twice; bucket 1: complete; bucket 2 of another topic
    rows = [("t", 0, o, 1, "r") for o in (65, 0, 64, 63, 65)] + full + [("u", 0, 2 * BUCKET_SIZE + 1, 1, "r")]
    got = {(r["topic"], r["bucket"]): r for r in examine_buckets(sink(rows)).to_pylist()}
    assert {k: (r["rows"], r["distinct"], r["min_offset"], r["max_offset"]) for k, r in got.items()} == {
        ("t", 0): (5, 4, 0, 65),
        ("t", 1): (BUCKET_SIZE, BUCKET_SIZE, BUCKET_SIZE, 2 * BUCKET_SIZE - 1),
        ("u", 2): (1, 1, 2 * BUCKET_SIZE + 1, 2 * BUCKET_SIZE + 1),
    }
    # Bit 63 of a word is its sign bit: the word is a signed long, as Spark keeps it.
    assert got[("t", 0)]["words"] == [{"word": 0, "bits": 1 | -(1 << 63)}, {"word": 1, "bits": 0b11}]
    assert got[("t", 1)]["words"] is None
    assert got[("u", 2)]["words"] == [{"word": 2 * BUCKET_SIZE // 64, "bits": 0b10}]


def test_duplicates_fold_into_runs_of_consecutive_offsets_with_the_same_writers() -> None:
    rows: list[Row] = [("t", 0, o, 1, "run-1") for o in range(10)]
    rows += [("t", 0, o, 7, "run-2") for o in (2, 3, 4, 6)]  # 2..4 and 6: two runs
    rows += [("t", 0, 5, None, None), ("t", 0, 5, 3, None)]  # 5: three copies, other writers
    runs = examine_buckets(sink(rows)).to_pylist()[0]["duplicates"]
    one_each = writers_json([("run-1", 1), ("run-2", 7)])
    assert runs == [
        {
            "offset_start": 2,
            "offset_end": 5,
            "offsets": 3,
            "extra_copies": 3,
            "max_copies": 2,
            "writers": one_each,
        },
        {
            "offset_start": 5,
            "offset_end": 6,
            "offsets": 1,
            "extra_copies": 2,
            "max_copies": 3,
            "writers": '[{},{"cp":3},{"run":"run-1","cp":1}]',
        },
        {
            "offset_start": 6,
            "offset_end": 7,
            "offsets": 1,
            "extra_copies": 1,
            "max_copies": 2,
            "writers": one_each,
        },
    ]


def test_writers_are_listed_in_sparks_order_with_null_fields_left_out() -> None:
    assert writers_json([("b", 1), (None, 2), ("a", None), ("a", 1), (None, None), ("\u00e9", 0)]) == (
        '[{},{"cp":2},{"run":"a"},{"run":"a","cp":1},{"run":"b","cp":1},{"run":"\u00e9","cp":0}]'
    )


def test_a_run_cut_by_a_bucket_edge_is_joined_again_on_the_driver() -> None:
    edge = range(BUCKET_SIZE - 2, BUCKET_SIZE + 3)
    rows: list[Row] = [("t", 0, o, 1, "run-1") for o in edge for _ in range(2)]
    rows += [("t", 0, BUCKET_SIZE + 3, 1, "run-1"), ("t", 0, BUCKET_SIZE + 3, 2, "run-1")]  # other writers
    examined = examine_buckets(sink(rows))
    assert [len(r["duplicates"]) for r in examined.to_pylist()] == [1, 2]
    found = partitions_examined(examined)[("t", 0)]
    assert [
        (d["offset_start"], d["offset_end"], d["offsets"], d["extra_copies"]) for d in found.duplicates
    ] == [
        (BUCKET_SIZE - 2, BUCKET_SIZE + 3, 5, 5),
        (BUCKET_SIZE + 3, BUCKET_SIZE + 4, 1, 1),
    ]
    assert found.buckets == (
        BucketStat(0, 4, 2, BUCKET_SIZE - 2, BUCKET_SIZE - 1),
        BucketStat(1, 8, 4, BUCKET_SIZE, BUCKET_SIZE + 3),
    )
    assert bitmap_offsets(1, found.bitmap(1)) == [BUCKET_SIZE + i for i in range(4)]


def test_joined_runs_join_only_touching_runs_of_the_same_writers() -> None:
    def run(start: int, end: int, writers: str, copies: int = 2) -> dict[str, object]:
        n = end - start
        return {
            "offset_start": start,
            "offset_end": end,
            "offsets": n,
            "extra_copies": n * (copies - 1),
            "max_copies": copies,
            "writers": writers,
        }

    assert joined_runs([run(20, 22, "a", 3), run(10, 20, "a"), run(22, 23, "b"), run(24, 25, "a")]) == [
        {**run(10, 22, "a"), "extra_copies": 14, "max_copies": 3},
        run(22, 23, "b"),
        run(24, 25, "a"),
    ]


def test_every_group_at_once_equals_one_group_at_a_time() -> None:
    """The driver runs the rule over all groups in one call, a Spark task over the whole groups
    hashed to it: however the groups are split, the rows are the same."""
    rnd = random.Random(3)
    writers: list[tuple[int | None, str | None]] = [(1, "run-1"), (7, "run-2"), (None, None), (3, None)]
    rows: list[Row] = []
    for topic in ("t", "u"):
        for partition in (0, 1, 2):
            for o in range(BUCKET_SIZE - 300, BUCKET_SIZE + 300):
                for cp, run in rnd.sample(writers, rnd.choice([0, 1, 1, 1, 1, 2, 3])):
                    rows.append((topic, partition, o + partition * BUCKET_SIZE, cp, run))
    rnd.shuffle(rows)
    groups: dict[tuple[str, int, int], list[Row]] = {}
    for r in rows:
        groups.setdefault((r[0], r[1], r[2] // BUCKET_SIZE), []).append(r)
    one_by_one = pa.concat_tables(examine_buckets(sink(g)) for g in groups.values())

    def keyed(table: pa.Table) -> dict[tuple[str, int, int], dict[str, object]]:
        return {(r["topic"], r["partition"], r["bucket"]): r for r in table.to_pylist()}

    at_once = examine_buckets(sink(rows))
    assert at_once.num_rows == len(groups) == 12
    assert keyed(at_once) == keyed(one_by_one)
    assert partitions_examined(at_once) == partitions_examined(one_by_one)


def test_spark_tasks_hold_no_more_rows_than_the_driver_route_and_use_every_core() -> None:
    assert examine_tasks(2_500_000, parallelism=2, max_rows=1_000_000) == 3
    assert examine_tasks(2_000_000, parallelism=2, max_rows=1_000_000) == 2
    assert examine_tasks(10, parallelism=4, max_rows=1_000_000) == 4
    assert examine_tasks(10, parallelism=0, max_rows=0) == 10
