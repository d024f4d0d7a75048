"""reconcile: one test per finding type of CONTRACTS.md section 5, benign and empty cases
included, on small hand-built frames; then the whole run over Delta tables (MERGE, incremental
window, a run killed midway)."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.contracts import vocabulary as vocab
from app.contracts.findings import IDENTITY_COLUMNS
from app.contracts.tables import PARTITION_SUMMARY_SCHEMA
from app.kafka.gaps import SuspectedGap
from app.reconcile import findings as rc
from app.reconcile.findings import PartitionRange
from app.reconcile.inputs import read_group_commit_rows, read_ledger_rows
from app.reconcile.ledger import audit as la
from app.reconcile.ledger import commit_rules
from app.reconcile.outputs import last_window_end
from app.reconcile.sink import offsets as sink_offsets
from app.reconcile.sink.buckets import (
    EXAMINED_SCHEMA,
    examine_buckets,
    examined_by_spark,
    partitions_examined,
)
from app.reconcile.sink.coordinates import (
    EXACT_FILTER_MAX_RANGES,
    SinkColumns,
    SinkOutcome,
    SinkReader,
    _rows_to_ranges,
    examine_sink,
)
from app.reconcile.sink.offsets import (
    BUCKET_SIZE,
    bitmap_offsets,
    bucket_bitmap,
    elementary_segments,
    expected_fingerprint,
    proven_complete,
    range_fingerprint,
    sink_fingerprints,
    xxhash64_longs,
)
from app.routes import EXAMINE_DRIVER_MAX_ROWS
from app.storage import delta_rows
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.support.config import build_config
from tests.support.ledger_data import commits_table, ledger_table, sink_table, write_table
from tests.support.reconcile import read, reconcile, save
from tests.support.spark_tables import (
    GROUP,
    JOB,
    TOPIC,
    at,
    checkpoint,
    commits_df,
    ev,
    gc,
    ledger_df,
    rows_of,
    sink_df,
    sink_rows,
)

pytestmark = pytest.mark.spark

WINDOW = rc.AuditWindow(until=at(10_000))
RULES = rc.MatchRules(commit_match_window_s=60, clock_skew_s=1)


def findings(found: DataFrame | Sequence[rc.Finding], finding_type: str) -> list[dict[str, Any]]:
    """Findings of one type as plain dicts with their evidence parsed, from a table or a rule."""
    if isinstance(found, DataFrame):
        all_rows = [{**r.asDict(), "evidence": json.loads(r["evidence"])} for r in found.collect()]
    else:
        all_rows = [dataclasses.asdict(f) for f in found]
    rows = [r for r in all_rows if r["finding_type"] == finding_type]
    return sorted(rows, key=lambda r: (r["partition"] or 0, r["checkpoint_id"] or 0, r["offset_start"] or 0))


def audit(
    ledger: DataFrame, commits: DataFrame | None = None, window: rc.AuditWindow = WINDOW
) -> la.LedgerAudit:
    """The ledger analysis over hand-built frames, as run_reconcile feeds it (one Arrow copy each)."""
    gc_rows = commits if commits is not None else commits_df(ledger.sparkSession)
    return la.LedgerAudit(ledger.toArrow(), gc_rows.toArrow(), window, RULES)


def ranges(spark: SparkSession, ledger: DataFrame, window: rc.AuditWindow = WINDOW) -> list[PartitionRange]:
    return _rows_to_ranges(audit(ledger, window=window).coverage())


def examine(
    spark: SparkSession,
    ledger: DataFrame,
    sink: DataFrame,
    active: str | None = None,
    driver_max_rows: int = EXAMINE_DRIVER_MAX_ROWS,
) -> SinkOutcome:
    reader = SinkReader(
        sink, SinkColumns("kafka_topic", "kafka_partition", "kafka_offset", "_checkpoint_id", "_run_id")
    )
    return examine_sink(spark, reader, ranges(spark, ledger), active, driver_max_rows)


# --- sink: GAP, DUPLICATE, SINK_BEYOND_CHECKPOINT ------------------------------------------------


def test_sink_aggregates_prove_complete_partitions_and_locate_gaps_and_duplicates(
    spark: SparkSession,
) -> None:
    ledger = ledger_df(
        spark,
        ev("OFFSETS_RESTORED", 0, offsets={0: 0, 1: 0, 2: 0, 3: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 100, 1: 100, 2: 20, 3: 5}),
        # partition 4 crosses a bitmap bucket boundary (32768)
        ev("OFFSETS_RESTORED", 0, offsets={4: 32760}, detail={"source": "specific"}),
        checkpoint(2, 20, {4: 32780}),
    )
    sink = sink_df(
        spark,
        sink_rows(0, range(100)),  # complete
        sink_rows(1, [o for o in range(100) if not 40 <= o < 50 and o != 60]),  # two holes
        sink_rows(2, range(20)),
        sink_rows(2, range(10, 13), run="run-2", cp=7),  # 10..12 written twice
        # partition 3: read by the job, never in the sink
        sink_rows(4, [o for o in range(32760, 32780) if o not in (32767, 32768)]),
    )
    out = examine(spark, ledger, sink)

    assert sorted((r.partition, s, e) for r, s, e in out.gaps) == [
        (1, 40, 50),
        (1, 60, 61),
        (3, 0, 5),
        (4, 32767, 32769),
    ]
    dups = findings(out.rows, vocab.DUPLICATE)
    assert [(d["partition"], d["offset_start"], d["offset_end"], d["record_count"]) for d in dups] == [
        (2, 10, 13, 3)
    ]
    assert dups[0]["evidence"]["writers"] == [
        {"cp": 1, "run": "run-1"},
        {"cp": 7, "run": "run-2"},
    ]
    stats = out.stats[(JOB, TOPIC, 2)]
    assert (stats.rows, stats.distinct, stats.min_offset, stats.max_offset) == (23, 20, 0, 19)
    assert out.stats[(JOB, TOPIC, 3)].rows == 0


def test_the_driver_and_spark_examinations_give_the_same_gaps_duplicates_and_statistics(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Partitions the fingerprints do not prove complete are examined on the driver when they hold
    few rows, by Spark otherwise. Both must find what the rows say, and the same: missing ranges,
    duplicate runs with their writers (null ones and non-ASCII ones included), statistics. Rows
    outside a range count in neither, even in a bucket the range shares."""
    rnd = random.Random(11)
    his = {0: 2 * BUCKET_SIZE + 17, 1: 2000, 2: 700, 3: 50, 5: 33_000}
    los = {0: 0, 1: 0, 2: 0, 3: 0, 5: 32_000}
    ledger = ledger_df(
        spark,
        ev("OFFSETS_RESTORED", 0, offsets={0: 0, 1: 0, 2: 0, 3: 0}, detail={"source": "earliest"}),
        ev("OFFSETS_RESTORED", 0, offsets={5: 32_000}, detail={"source": "specific"}),
        checkpoint(1, 10, his),
    )
    extra_writers: list[tuple[str | None, int | None]] = [
        ("run-2", 7),
        ("run-2", None),
        (None, 3),
        (None, None),
        ("r\u00e9-run", 2),
        ("run-1", 1),
    ]

    def copies(p: int, offsets: list[int]) -> list[tuple[Any, ...]]:
        out = []
        for o in offsets:
            for run, cp in rnd.sample(extra_writers, rnd.choice([1, 1, 2])):
                out.append((TOPIC, p, o, None, cp, run, None, None))
        return out

    # 0: three buckets, one complete, holes and duplicate runs in the others; rows past hi.
    p0 = [o for o in range(his[0] + 40) if o // BUCKET_SIZE == 1 or rnd.random() > 0.01]
    p0_dups = sorted({*range(100, 130), *range(BUCKET_SIZE - 5, BUCKET_SIZE + 5), *rnd.sample(p0, 200)})
    # 1: complete but for duplicates; 5: crosses a bucket edge, with duplicates below lo in the
    # bucket it shares with them.
    p5 = [o for o in range(31_900, 33_000) if o not in (32_767, 32_768, 32_900)]
    rows = [
        *sink_rows(0, p0),
        *copies(0, p0_dups),
        *sink_rows(1, range(2000)),
        *copies(1, [5, 6, 7, 9, 1999]),
        *sink_rows(2, range(700)),  # complete: proven by its fingerprint, examined by neither
        *sink_rows(5, p5),
        *copies(5, [*range(31_950, 31_960), *range(32_760, 32_775)]),
    ]
    sink = sink_df(spark, rows)

    caplog.set_level(logging.INFO, logger="app.reconcile.sink")
    on_driver = examine(spark, ledger, sink)
    assert "examined per bucket on the driver" in caplog.text
    caplog.clear()
    in_spark = examine(spark, ledger, sink, driver_max_rows=0)
    assert "examined per bucket by Spark" in caplog.text

    held: dict[int, list[int]] = {}
    for _, p, o, *_ in rows:
        if p in his and los[p] <= o < his[p]:
            held.setdefault(p, []).append(o)
    present = {p: set(v) for p, v in held.items()}
    want_gaps = sorted((p, o) for p in his for o in range(los[p], his[p]) if o not in present.get(p, set()))
    for out in (on_driver, in_spark):
        got_gaps = sorted((r.partition, o) for r, s, e in out.gaps for o in range(s, e))
        assert got_gaps == want_gaps
        dups = findings(out.rows, vocab.DUPLICATE)
        want_extra = {p: len(v) - len(set(v)) for p, v in held.items() if len(v) > len(set(v))}
        got_extra: dict[int, int] = {}
        for d in dups:
            got_extra[d["partition"]] = got_extra.get(d["partition"], 0) + d["record_count"]
        assert got_extra == want_extra
    assert on_driver.stats == in_spark.stats
    assert sorted(on_driver.gaps, key=repr) == sorted(in_spark.gaps, key=repr)

    def by_identity(out: SinkOutcome) -> list[dict[str, Any]]:
        return sorted((dataclasses.asdict(f) for f in out.rows), key=repr)

    assert by_identity(on_driver) == by_identity(in_spark)
    writers = [w for d in findings(on_driver.rows, vocab.DUPLICATE) for w in d["evidence"]["writers"]]
    assert {} in writers
    assert {"run": "r\u00e9-run", "cp": 2} in writers


def test_the_bucket_examination_gives_the_same_rows_on_both_engines_and_they_equal_a_direct_count(
    spark: SparkSession,
) -> None:
    """``examine_buckets`` is the one rule; the driver runs it over every group at once, Spark's
    executors over the whole groups hashed to each task. Both give the same rows, and those are what a
    direct count of the rows says: statistics, the words of incomplete buckets only, duplicate runs
    (cut at bucket edges, writers in the evidence order)."""
    rng = random.Random(7)
    # word edges (63, 64), bucket edges (32767, 32768) and random offsets, some of them repeated
    offsets = [0, 63, 64, 127, 32767, 32768, 65535, *[rng.randrange(0, 3 * BUCKET_SIZE) for _ in range(500)]]
    offsets += rng.sample(offsets, 60)
    rows = [(t, p, o) for t in ("t", "u") for p in (0, 1) for o in offsets if p == 0 or o % 3]
    # One complete bucket (3), and one complete but for a duplicate (4 of partition 1).
    rows += [("t", 0, o) for o in range(3 * BUCKET_SIZE, 4 * BUCKET_SIZE)]
    rows += [("t", 1, o) for o in [*range(4 * BUCKET_SIZE, 5 * BUCKET_SIZE), 4 * BUCKET_SIZE + 9]]
    # Partition 2 holds a run twice across the edge of buckets 0 and 1, its second copy by another writer.
    edge = [("u", 2, o) for o in range(BUCKET_SIZE - 3, BUCKET_SIZE + 2)]
    rows += edge
    writers = {len(rows) + i: ("run-2", 7) for i in range(len(edge))}
    rows += edge
    sink = spark.createDataFrame(
        [(t, p, o, *writers.get(i, ("run-1", 1))[::-1]) for i, (t, p, o) in enumerate(rows)],
        "topic string, partition int, offset long, writer_checkpoint_id long, writer_run_id string",
    )

    on_driver = examine_buckets(sink.toArrow())
    by_spark = examined_by_spark(sink, 3).toArrow()

    def keyed(table: pa.Table) -> dict[tuple[str, int, int], dict[str, Any]]:
        return {(r["topic"], r["partition"], r["bucket"]): r for r in table.to_pylist()}

    assert on_driver.schema == by_spark.schema == EXAMINED_SCHEMA
    assert keyed(on_driver) == keyed(by_spark)
    got = keyed(on_driver)
    want: dict[tuple[str, int, int], list[int]] = {}
    for t, p, o in rows:
        want.setdefault((t, p, o // BUCKET_SIZE), []).append(o)
    assert {k: (r["rows"], r["distinct"], r["min_offset"], r["max_offset"]) for k, r in got.items()} == {
        k: (len(v), len(set(v)), min(v), max(v)) for k, v in want.items()
    }
    incomplete = {k for k, v in want.items() if len(set(v)) < BUCKET_SIZE}
    assert {("t", 0, 3), ("t", 1, 4)}.isdisjoint(incomplete)
    for key, r in got.items():
        if key not in incomplete:
            assert r["words"] is None
            continue
        bitmap = bucket_bitmap(key[2], [(w["word"], w["bits"]) for w in r["words"]])
        assert bitmap_offsets(key[2], bitmap) == sorted(set(want[key]))
    for key, r in got.items():
        held = [o for o in want[key] if want[key].count(o) > 1]
        assert sum(d["extra_copies"] for d in r["duplicates"]) == len(held) - len(set(held))
    edge_runs = [
        (k[2], d["offset_start"], d["offset_end"], d["writers"])
        for k, r in got.items()
        for d in r["duplicates"]
        if k[:2] == ("u", 2)
    ]
    pair = '[{"run":"run-1","cp":1},{"run":"run-2","cp":7}]'
    assert sorted(edge_runs) == [
        (0, BUCKET_SIZE - 3, BUCKET_SIZE, pair),
        (1, BUCKET_SIZE, BUCKET_SIZE + 2, pair),
    ]
    # The driver joins the two pieces again: one run, as the partition holds it.
    joined = partitions_examined(on_driver)[("u", 2)].duplicates
    assert [(d["offset_start"], d["offset_end"], d["offsets"], d["extra_copies"]) for d in joined] == [
        (BUCKET_SIZE - 3, BUCKET_SIZE + 2, 5, 5)
    ]


def test_the_driver_side_xxhash64_is_sparks(spark: SparkSession) -> None:
    values = [0, 1, -1, 42, 781_249, 2**62 + 12345, -(2**63), 2**63 - 1, *range(1000, 1100)]
    got = [int(h) for h in xxhash64_longs(np.array(values, dtype=np.int64)).view(np.int64)]
    frame = spark.createDataFrame([(v,) for v in values], "v long")
    assert got == [r.h for r in frame.select(F.xxhash64("v").alias("h")).collect()]


def test_expected_fingerprints_equal_the_fingerprint_of_a_sink_holding_each_offset_once(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Overlapping ranges of three partitions, one longer than a hashing batch.
    monkeypatch.setattr(sink_offsets, "FINGERPRINT_BATCH", 1000)
    wanted = {0: (5, 5 + 2000 + 17), 1: (100, 300), 2: (250, 260)}
    rows = [("t", p, o) for p, (lo, hi) in wanted.items() for o in range(lo, hi)]
    sink = spark.createDataFrame(rows, "topic string, partition int, offset long")
    got = {r["partition"]: r for r in sink_fingerprints(sink, ["t"]).collect()}
    segments = elementary_segments(wanted.values())
    expected = {(a, b): expected_fingerprint(a, b) for a, b in segments}
    for p, (lo, hi) in wanted.items():
        g = got[p]
        assert (g["rows"], g["min_offset"], g["max_offset"]) == (hi - lo, lo, hi - 1)
        assert g["fingerprint"] == range_fingerprint(lo, hi, expected)
        assert proven_complete(
            lo,
            hi,
            g["rows"],
            g["min_offset"],
            g["max_offset"],
            g["fingerprint"],
            range_fingerprint(lo, hi, expected),
        )


def test_a_partition_with_as_many_rows_as_offsets_but_a_gap_and_a_duplicate_is_not_proven_complete(
    spark: SparkSession,
) -> None:
    ledger = ledger_df(
        spark,
        ev("OFFSETS_RESTORED", 0, offsets={0: 0, 1: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 100, 1: 100}),
    )
    # partition 1: offset 30 missing, 70 written twice: 100 rows for 100 offsets, same min and max.
    sink = sink_df(
        spark,
        sink_rows(0, range(100)),
        sink_rows(1, [o for o in range(100) if o != 30]),
        sink_rows(1, [70], run="run-2", cp=7),
    )
    out = examine(spark, ledger, sink)

    assert [(r.partition, s, e) for r, s, e in out.gaps] == [(1, 30, 31)]
    dups = findings(out.rows, vocab.DUPLICATE)
    assert [(d["partition"], d["offset_start"], d["offset_end"]) for d in dups] == [(1, 70, 71)]
    assert (out.stats[(JOB, TOPIC, 1)].rows, out.stats[(JOB, TOPIC, 1)].distinct) == (100, 99)
    assert (out.stats[(JOB, TOPIC, 0)].rows, out.stats[(JOB, TOPIC, 0)].distinct) == (100, 100)


def test_sink_beyond_last_completed_checkpoint_is_reported_unless_the_live_run_writes_it(
    spark: SparkSession,
) -> None:
    ledger = ledger_df(
        spark,
        ev("RUN_STARTED", 0, run="run-1"),
        ev("OFFSETS_RESTORED", 0, offsets={0: 0}, run="run-1"),
        checkpoint(1, 10, {0: 10}),
        ev("RUN_STOPPED", 30, run="run-1"),
    )
    sink = sink_df(spark, sink_rows(0, range(10)), sink_rows(0, range(10, 14), cp=2))
    beyond = findings(examine(spark, ledger, sink).rows, vocab.SINK_BEYOND_CHECKPOINT)
    assert [(b["offset_start"], b["offset_end"], b["record_count"], b["severity"]) for b in beyond] == [
        (10, 14, 4, "warn")
    ]
    assert beyond[0]["evidence"]["writer_checkpoints"] == [2]

    # The same rows while run-1 is still running are its in-flight batch, not an anomaly.
    live = examine(spark, ledger.filter(F.col("event_type") != "RUN_STOPPED"), sink, active="run-1")
    assert findings(live.rows, vocab.SINK_BEYOND_CHECKPOINT) == []


def test_many_partitions_are_read_through_a_bounding_box_and_an_exact_join(spark: SparkSession) -> None:
    # More ranges than EXACT_FILTER_MAX_RANGES, each partition at its own offsets.
    n = EXACT_FILTER_MAX_RANGES + 4
    ledger = ledger_df(
        spark,
        ev("OFFSETS_RESTORED", 0, offsets={p: 10 * p for p in range(n)}),
        checkpoint(1, 10, {p: 10 * p + 10 for p in range(n)}),
    )
    present = [sink_rows(p, range(0, 10 * p + 15)) for p in range(n) if p != 7]  # 7 is missing entirely
    present.append(sink_rows(7, range(70, 75)))
    out = examine(spark, ledger, sink_df(spark, *present))
    assert sorted((r.partition, s, e) for r, s, e in out.gaps) == [(7, 75, 80)]
    assert out.stats[(JOB, TOPIC, 3)].rows == 10  # only [30, 40) of partition 3 was read


def test_finding_ids_hash_identity_not_run_or_time(spark: SparkSession) -> None:
    ledger = ledger_df(
        spark, ev("COMMIT_FAILED", 1, cp=1, offsets={0: 10}, detail={"error": "X", "attempt": 1})
    )
    core = commit_rules.commit_failures(audit(ledger))
    a = rc.finalize_findings(core, "rec-1", at(100))
    b = rc.finalize_findings(core, "rec-2", at(200))
    assert len(a) == len(b) == 1
    assert a[0].finding_id == b[0].finding_id
    assert len(a[0].finding_id) == 64
    # The id earlier versions computed in Spark, sha2 over the identity columns cast to strings
    # (nulls spelled out): findings already stored keep their ids, so re-runs update, not add.
    parts = [F.coalesce(F.col(c).cast("string"), F.lit("\u2400")) for c in IDENTITY_COLUMNS]
    spark_id = spark.createDataFrame([f.core_row() for f in core], rc.FINDING_CORE_SCHEMA).select(
        F.sha2(F.concat_ws("\u241f", *parts), 256).alias("id")
    )
    assert [r.id for r in spark_id.collect()] == [a[0].finding_id]


# --- whole runs over Delta tables ----------------------------------------------------------------


def test_empty_window_and_missing_tables_give_a_clean_run(spark: SparkSession, tmp_path: Path) -> None:
    cfg = build_config(data_dir=tmp_path)
    result = reconcile(spark, cfg, "rec-empty")
    assert (result.partitions, result.counts, result.worst()) == (0, {}, None)
    assert read(spark, cfg, "findings").count() == 0

    # Ledger rows exist but none inside the window: still nothing to judge.
    save(ledger_table(checkpoint(1, 0, {0: 10})), cfg, "ledger")
    late = reconcile(spark, cfg, "rec-late", since=at(5000), until=at(6000))
    assert (late.partitions, late.counts) == (0, {})


def test_full_run_merges_findings_idempotently_and_survives_a_killed_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = build_config(data_dir=tmp_path)
    save(
        ledger_table(
            ev("RUN_STARTED", 0),
            ev("OFFSETS_RESTORED", 0, offsets={0: 0, 1: 0}, detail={"source": "earliest"}),
            checkpoint(1, 10, {0: 50, 1: 50}),
            ev("RUN_STOPPED", 30),
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(12, 0, 50), gc(12, 1, 50), gc(4000, 0, 40)), cfg, "group_commits")
    save(sink_table(sink_rows(0, range(50)), sink_rows(1, range(0, 45))), cfg, "sink")

    def benign(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        return [{"status": "benign", "data_records": 0} for _ in gaps]

    first = reconcile(spark, cfg, "rec-1", confirmer=benign)
    assert first.counts == {
        ("GAP", "info"): 1,
        ("COMMIT_REGRESSION", "error"): 1,
        ("FOREIGN_COMMIT", "error"): 1,
    }
    before = read(spark, cfg, "findings").select("finding_id", "status", "detected_at").collect()

    # A run killed after writing its partition_summary but before recording success ...
    summary_path = tables_from_config(cfg).partition_summary
    stored = delta_rows.read_columns(None, summary_path, PARTITION_SUMMARY_SCHEMA.fieldNames()) or []
    orphan = [{**r, "reconcile_run_id": "rec-killed"} for r in stored]
    write_table(summary_path, PARTITION_SUMMARY_SCHEMA, orphan)
    # ... and the same inputs reconciled again, this time without confirmation.
    second = reconcile(spark, cfg, "rec-2", since=at(-3600))
    after = read(spark, cfg, "findings")
    assert sorted(r.finding_id for r in after.collect()) == sorted(r.finding_id for r in before)
    assert rows_of(
        after.filter("finding_type = 'GAP'"), "offset_start", "offset_end", "status", "reconcile_run_id"
    ) == {(45, 50, "open", "rec-2")}
    # detected_at is the first detection; the orphaned summary rows are gone.
    assert {r.detected_at for r in after.collect()} == {r.detected_at for r in before}
    summary = read(spark, cfg, "partition_summary")
    assert rows_of(summary, "reconcile_run_id") == {("rec-1",), ("rec-2",)}
    p1 = summary.filter("reconcile_run_id = 'rec-2' AND partition = 1").first()
    assert p1 is not None
    assert (p1.sink_count, p1.sink_distinct, p1.sink_min_offset, p1.sink_max_offset) == (45, 45, 0, 44)
    assert (p1.last_checkpoint_offset, p1.last_committed_offset, p1.commit_lag_offsets) == (50, 50, 0)
    assert json.loads(p1.findings_by_type) == {"GAP": 1}
    assert second.worst() == "critical"


def test_incremental_window_starts_from_the_previous_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    cfg = build_config(data_dir=tmp_path)
    save(
        ledger_table(
            ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
            checkpoint(1, 10, {0: 50}),
            checkpoint(2, 1000, {0: 100}),
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(12, 0, 50), gc(1002, 0, 100)), cfg, "group_commits")
    # 10..19 missing from the first checkpoint's range, 60..69 from the second's
    save(
        sink_table(sink_rows(0, [o for o in range(100) if not (10 <= o < 20 or 60 <= o < 70)])),
        cfg,
        "sink",
    )

    nightly = reconcile(spark, cfg, "rec-night", since=at(500), until=at(2000))
    gaps = read(spark, cfg, "findings").filter("finding_type = 'GAP'")
    assert rows_of(gaps, "offset_start", "offset_end") == {(60, 70)}
    assert nightly.partitions == 1
    # Without --since the next run continues where the last successful one stopped.
    assert last_window_end(AuditTables.from_config(cfg, spark).audit_runs, "reconcile", []) == at(2000)


def test_a_checkpoint_written_after_the_previous_run_read_the_ledger_is_examined_by_the_next(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The second checkpoint completed at 499 s (snapshot at 498), before the first run's end
    # (500 s), but its rows were written after that run read the ledger (a slow write; a watch
    # cycle in between): the next default window reaches back to them, or the range that
    # checkpoint vouches for is never examined and what is missing there is never found.
    cfg = build_config(data_dir=tmp_path)
    restored = ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"})
    save(ledger_table(restored, checkpoint(1, 10, {0: 50})), cfg, "ledger")
    save(commits_table(gc(12, 0, 50)), cfg, "group_commits")
    save(sink_table(sink_rows(0, [o for o in range(100) if not 60 <= o < 70])), cfg, "sink")
    reconcile(spark, cfg, "rec-1", until=at(500))
    assert read(spark, cfg, "findings").filter("finding_type = 'GAP'").count() == 0

    save(ledger_table(checkpoint(2, 498, {0: 100}, commit=False)), cfg, "ledger")
    second = reconcile(spark, cfg, "rec-2", until=at(2000))
    assert second.window.since == at(498)
    gaps = read(spark, cfg, "findings").filter("finding_type = 'GAP'")
    assert rows_of(gaps, "offset_start", "offset_end") == {(60, 70)}
    # and the run after it, with nothing written late, starts where this one ended
    assert reconcile(spark, cfg, "rec-3", until=at(3000)).window.since == at(2000)


def test_the_driver_input_readers_return_the_rows_spark_reads_for_the_window(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Two days of ledger for two jobs, and commits of two groups, some before the look-back.
    cfg = build_config(data_dir=tmp_path)
    save(
        ledger_table(
            checkpoint(1, 0, {0: 10}),
            checkpoint(2, 90_000, {0: 20}),
            checkpoint(3, 90_010, {0: 30}, job="job-b", group="grp-b"),
        ),
        cfg,
        "ledger",
    )
    save(
        commits_table(
            gc(1, 0, 10),
            gc(90_001, 0, 20),
            gc(90_011, 0, 30, group="grp-b"),
            gc(None, 1, 5, kind="snapshot"),
        ),
        cfg,
        "group_commits",
    )
    tables = AuditTables.from_config(cfg, spark)
    window = rc.AuditWindow(until=at(100_000), since=at(90_000))

    def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))

    def spark_rows(path: str, keep: Any) -> list[dict[str, Any]]:
        return sorted_rows(spark.read.format("delta").load(path).filter(keep).toArrow().to_pylist())

    ledger = sorted_rows(read_ledger_rows(tables.ledger, window, [JOB], 0).to_pylist())
    # Only the look-back's days (event_date) and the job asked for.
    assert ledger == spark_rows(
        tables.ledger.location, (F.col("event_date") >= F.lit(at(90_000).date())) & (F.col("job_name") == JOB)
    )
    assert {(r["job_name"], r["checkpoint_id"]) for r in ledger} == {(JOB, 2)}
    commits = sorted_rows(read_group_commit_rows(tables.group_commits, window, [GROUP], 0).to_pylist())
    # A commit without a time (an Admin API snapshot) is kept; one before the look-back is not.
    when = F.coalesce("commit_time", "log_time")
    assert commits == spark_rows(
        tables.group_commits.location,
        (F.col("group_id") == GROUP) & (when.isNull() | (when >= F.lit(at(90_000)))),
    )
    assert sorted(r["committed_offset"] for r in commits) == [5, 20]
    assert read_ledger_rows(tables.ledger.at(str(tmp_path / "nothing")), window, [], 0).num_rows == 0


def test_an_open_incident_keeps_the_loss_earlier_windows_found(spark: SparkSession, tmp_path: Path) -> None:
    # Two windows, each finding ten records lost in the same job: its one open gap incident counts
    # both, not only the latest window's (a later window must never overwrite an earlier loss).
    cfg = build_config(data_dir=tmp_path)
    save(
        ledger_table(
            ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
            checkpoint(1, 10, {0: 50}),
            checkpoint(2, 1000, {0: 100}),
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(12, 0, 50), gc(1002, 0, 100)), cfg, "group_commits")
    save(
        sink_table(sink_rows(0, [o for o in range(100) if not (10 <= o < 20 or 60 <= o < 70)])),
        cfg,
        "sink",
    )

    def lost(gaps: Sequence[SuspectedGap]) -> list[dict[str, Any]]:
        return [{"status": "confirmed", "data_records": g.end - g.start} for g in gaps]

    reconcile(spark, cfg, "rec-first", confirmer=lost, since=at(-3600), until=at(500))
    reconcile(spark, cfg, "rec-second", confirmer=lost, since=at(500), until=at(2000))
    gap_findings = {
        r.finding_id for r in read(spark, cfg, "findings").filter("finding_type = 'GAP'").collect()
    }
    assert len(gap_findings) == 2
    gaps = read(spark, cfg, "incidents").filter(F.col("kind") == vocab.INCIDENT_GAP).collect()
    assert len(gaps) == 1
    assert (gaps[0].records_lost, set(gaps[0].finding_ids), gaps[0].status) == (20, gap_findings, "open")
