"""check: the Great Expectations suites pass on clean audit tables and fail, expectation by
expectation, on tables seeded with violations. The derived frames (snapshot completion, commits
against checkpoints, the ledger's detail fields) are specified first on tiny frames of their own, or,
for the commit check, on what a real reconcile computed; each rule is one text, run here by both
engines (DuckDB over Arrow, Spark over a DataFrame) against one expectation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from app.config import AppConfig
from app.contracts.tables import (
    COMPLETENESS_SCHEMA,
    FINDINGS_SCHEMA,
    LEDGER_SCHEMA,
    PARTITION_SUMMARY_SCHEMA,
    RESTARTS_SCHEMA,
    layout_of,
)
from app.quality import checks as q
from app.quality import frames
from app.quality import io as check_io
from app.quality.outcomes import CheckSummary
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.report import gather as report_io
from app.report import render as report
from app.storage.handles import AuditTables, open_handle
from app.storage.tables import tables_from_config
from checks.suites import LEDGER_IDENTITY
from tests.support.config import build_config
from tests.support.ledger_data import CONTRACTS, commits_table, ledger_table, sink_table
from tests.support.spark_tables import (
    GROUP,
    JOB,
    TOPIC,
    at,
    checkpoint,
    ev,
    gc,
    ledger_df,
    rows_of,
    sink_rows,
)

pytestmark = pytest.mark.spark


def nullable(schema: StructType) -> StructType:
    """The contract with every column nullable, so a test can seed the nulls the suites must catch."""
    return StructType([StructField(f.name, f.dataType, True) for f in schema.fields])


def finding(fid: str, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict(
        finding_id=fid, reconcile_run_id="rec-1", detected_at=at(100), finding_type="DUPLICATE",
        severity="error", status="open", job_name=JOB, group_id=GROUP, topic=TOPIC, partition=0,
        checkpoint_id=1, run_id="run-1", offset_start=3, offset_end=4, record_count=1, evidence="{}",
    )  # fmt: skip
    row.update(over)
    return row


def summary(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict(
        reconcile_run_id="rec-1", job_name=JOB, group_id=GROUP, topic=TOPIC, partition=0,
        sink_count=20, sink_distinct=20, sink_min_offset=0, sink_max_offset=19, last_checkpoint_id=2,
        last_checkpoint_offset=20, last_committed_offset=20, last_commit_time=at(12),
        commit_lag_offsets=0, commit_lag_seconds=0, findings_by_type="{}",
    )  # fmt: skip
    row.update(over)
    return row


def window(partition: int, start: float, **over: Any) -> dict[str, Any]:
    """A completeness row: a final, complete 10-minute window from ``at(start)``."""
    row: dict[str, Any] = dict(
        job_name=JOB, topic=TOPIC, partition=partition, window_start=at(start),
        window_end=at(start + 600), offset_start=0, offset_end=99, sink_mode="coordinates",
        expected=100, landed=100, lost=0, unverifiable=0, duplicated=0, pending=0,
        offsets_in_sink_batches=100, completeness=1.0, latency_p50_ms=500, latency_p95_ms=900,
        final=True, computed_at=at(3000), reconcile_run_id="rec-1",
    )  # fmt: skip
    row.update(over)
    return row


def frame(rows: list[dict[str, Any]], schema: StructType) -> pa.Table:
    """Rows as Arrow in the contract's columns, every one nullable (see `nullable`)."""
    return pa.Table.from_pylist(rows, schema=to_arrow_schema(nullable(schema)))


def save(rows: pa.Table, cfg: AppConfig, name: str) -> None:
    """A fixture table, written with delta-rs in the contract's columns and partitioning, every column
    nullable so that a seeded table can hold the nulls its suite must catch."""
    contract = CONTRACTS[name]
    write_deltalake(
        tables_from_config(cfg).named(name),
        rows.cast(to_arrow_schema(nullable(contract))),
        mode="overwrite",
        partition_by=list(layout_of(contract).partition_by) or None,
    )


def ordered_rows(out: pa.Table | DataFrame, *cols: str) -> list[tuple[Any, ...]]:
    """A frame's rows, in its order, whichever engine made it."""
    records = out.to_pylist() if isinstance(out, pa.Table) else [r.asDict() for r in out.collect()]
    return [tuple(r[c] for c in cols) for r in records]


def results_path(cfg: AppConfig) -> str:
    return tables_from_config(cfg).validation_results


@pytest.fixture
def cfg(tmp_path: Path) -> AppConfig:
    return build_config(data_dir=tmp_path / "data")


# --- derived frames ------------------------------------------------------------------------------


def test_snapshot_without_completion_is_named_except_the_newest_of_each_run(spark: SparkSession) -> None:
    events = [
        *checkpoint(1, 0, {0: 10}),
        *ev("CHECKPOINT_SNAPSHOT", 5, cp=2, offsets={0: 15}),  # never completed
        *checkpoint(3, 10, {0: 20}),
        *ev("CHECKPOINT_SNAPSHOT", 20, cp=4, offsets={0: 25}),  # newest of run-1: may be in flight
        *ev("CHECKPOINT_SNAPSHOT", 30, run="run-2", cp=5, offsets={0: 25}),  # newest of run-2
    ]
    expected = [("run-1", 1, None), ("run-1", 2, f"{JOB}/run-1/2"), ("run-1", 3, None)]

    on_driver = frames.checkpoint_completion(ledger_table(events))
    on_spark = frames.checkpoint_completion(ledger_df(spark, events))

    assert isinstance(on_driver, pa.Table)
    assert isinstance(on_spark, DataFrame)
    assert ordered_rows(on_driver, "run_id", "checkpoint_id", "snapshot_without_completion") == expected
    assert ordered_rows(on_spark, "run_id", "checkpoint_id", "snapshot_without_completion") == expected


def test_over_a_window_last_nights_exempt_checkpoint_is_judged_and_older_verdicts_are_not_repeated(
    spark: SparkSession,
) -> None:
    events = [
        *ev("CHECKPOINT_SNAPSHOT", 0, cp=1, offsets={0: 5}),  # never completed: reported last night
        *checkpoint(2, 2, {0: 10}),
        *ev("CHECKPOINT_SNAPSHOT", 5, cp=3, offsets={0: 15}),  # newest last night: exempt then
        # --- the window starts at 8
        *checkpoint(4, 10, {0: 20}),
        *ev("CHECKPOINT_SNAPSHOT", 20, cp=5, offsets={0: 25}),  # newest now: exempt
        *ev("CHECKPOINT_SNAPSHOT", 3, run="run-2", cp=7, offsets={0: 25}),  # run-2: nothing new
        *ev("CHECKPOINT_SNAPSHOT", 4, run="run-2", cp=8, offsets={0: 25}),
    ]
    expected = [("run-1", 3, f"{JOB}/run-1/3"), ("run-1", 4, None)]

    on_driver = frames.checkpoint_completion(ledger_table(events), since=at(8))
    on_spark = frames.checkpoint_completion(ledger_df(spark, events), since=at(8))

    assert ordered_rows(on_driver, "run_id", "checkpoint_id", "snapshot_without_completion") == expected
    assert ordered_rows(on_spark, "run_id", "checkpoint_id", "snapshot_without_completion") == expected


def test_the_ledger_frame_has_detail_identity_fields_and_null_for_detail_that_is_not_json(
    spark: SparkSession,
) -> None:
    events = [
        *ev(
            "COMMIT_FAILED", 1, cp=1, detail={"reason": "timeout", "error": "REQUEST_TIMED_OUT", "attempt": 2}
        ),
        *ev("RUN_STARTED", 0),  # no detail
    ]
    broken = events[0].to_row() | {"detail": "{not json", "checkpoint_id": 2}
    table = pa.concat_tables(
        [ledger_table(events), pa.Table.from_pylist([broken], schema=ledger_table().schema)]
    )
    expected = [
        (1, "timeout", "REQUEST_TIMED_OUT", "2"),
        (None, None, None, None),
        (2, None, None, None),  # Spark's get_json_object gives null for text that is not JSON: so must DuckDB
    ]
    detail = ("checkpoint_id", "detail_reason", "detail_error", "detail_attempt")

    on_driver = frames.ledger_frame(table)
    on_spark = frames.ledger_frame(spark.createDataFrame(table.to_pylist(), nullable(LEDGER_SCHEMA)))

    assert sorted(ordered_rows(on_driver, *detail), key=str) == sorted(expected, key=str)
    assert sorted(ordered_rows(on_spark, *detail), key=str) == sorted(expected, key=str)
    assert on_driver.column_names == on_spark.columns


def test_a_nights_check_validates_the_ledger_and_commits_of_its_window(
    spark: SparkSession, cfg: AppConfig
) -> None:
    old_checkpoint = checkpoint(1, 0, {0: 10})
    save(
        ledger_table(
            old_checkpoint,
            old_checkpoint[:1],  # its snapshot written twice: validated (and reported) by an earlier night
            checkpoint(2, 4000, {0: 20}),
            ev("CHECKPOINT_SNAPSHOT", 5000, cp=3, offsets={0: 25}),
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(3, 0, 10), gc(4002, 0, 20)), cfg, "group_commits")
    since = at(4000)  # the overlap reaches back two minutes: to 3880 s, past the old rows at 0-2 s
    options = q.CheckOptions(build_docs=False, write_results=False, since=since)

    night = q.run_checks(spark, cfg, "check-night", now=at(6000), options=options)
    whole = q.run_checks(spark, cfg, "check-all", options=dataclasses.replace(options, since=None))
    window_on_spark = q.run_checks(
        spark, cfg, "check-night-spark", options=dataclasses.replace(options, driver_max_rows=0)
    )

    assert night.failed() == window_on_spark.failed() == []
    assert [e.label for e in whole.failed()] == [
        f"expect_compound_columns_to_be_unique({list(LEDGER_IDENTITY)})"
    ]
    rows = next(e for e in night.outcomes if e.suite == "ledger" and "not_be_null(job_name)" in e.label)
    assert rows.observed["element_count"] == 5  # checkpoint 2's four events and checkpoint 3's snapshot
    commits = next(e for e in night.outcomes if e.suite == "group_commits" and "(group_id)" in e.label)
    assert commits.observed["element_count"] == 1  # the commit at 4002 s
    # The window is one predicate, read by either engine: the same rows.
    window = check_io.ledger_window(since - check_io.WINDOW_OVERLAP)
    read_on_driver = check_io.read_for_check(AuditTables.from_config(cfg, spark).ledger, 1000, window)
    read_on_spark = check_io.read_for_check(AuditTables.from_config(cfg, spark).ledger, 0, window)
    assert isinstance(read_on_driver, pa.Table)
    assert isinstance(read_on_spark, DataFrame)
    ledger_key = ("run_id", "checkpoint_id", "event_type", "partition")
    assert sorted(ordered_rows(read_on_driver, *ledger_key), key=str) == sorted(
        ordered_rows(read_on_spark, *ledger_key), key=str
    )
    assert len(ordered_rows(read_on_driver, *ledger_key)) == 5


def test_the_commit_check_compares_the_offsets_reconcile_computed(
    spark: SparkSession, cfg: AppConfig
) -> None:
    save(
        ledger_table(
            ev("RUN_STARTED", 0),
            ev("OFFSETS_RESTORED", 0, offsets={0: 0, 1: 0}, detail={"source": "earliest"}),
            checkpoint(1, 1, {0: 10, 1: 5}),
            checkpoint(2, 10, {0: 20, 1: 8}),
            ev("RUN_STOPPED", 20),
        ),
        cfg,
        "ledger",
    )
    commits = commits_table(
        gc(3, 0, 10),
        gc(13, 0, 20),  # latest for partition 0: at the checkpoint
        gc(13, 1, 9),  # beyond partition 1's completed 8
        gc(14, 0, 999, group="someone-elses-group"),  # not a group of an audited job
    )
    save(commits, cfg, "group_commits")
    save(sink_table(sink_rows(0, range(20)), sink_rows(1, range(8))), cfg, "sink")
    run_reconcile(spark, cfg, AuditRun(run_id="rec-1", now=at(1000), since=None, until=at(1000)))

    summary = spark.read.format("delta").load(tables_from_config(cfg).partition_summary)
    stored = check_io.read_for_check(AuditTables.from_config(cfg, spark).partition_summary, max_rows=1000)
    on_spark = frames.commits_vs_checkpoints(summary, "rec-1")
    on_driver = frames.commits_vs_checkpoints(stored, "rec-1")

    offsets = ("group_id", "partition", "committed_offset", "completed_offset")
    assert (
        sorted(ordered_rows(on_spark, *offsets))
        == sorted(ordered_rows(on_driver, *offsets))
        == [
            (GROUP, 0, 20, 20),
            (GROUP, 1, 9, 8),
        ]
    )
    assert ordered_rows(frames.commits_vs_checkpoints(stored, "another-run"), *offsets) == []
    # The check's offsets are the findings': the partition it sees ahead is the one reconcile
    # reported COMMITTED_AHEAD, and the dashboard's commit lag there is the same difference.
    ahead = (
        spark.read.format("delta")
        .load(tables_from_config(cfg).findings)
        .where("finding_type = 'COMMITTED_AHEAD'")
    )
    assert rows_of(ahead, "partition", "offset_start", "offset_end") == {(1, 8, 9)}
    assert rows_of(summary, "partition", "commit_lag_offsets") == {(0, 0), (1, -1)}


# --- whole suites over Delta tables --------------------------------------------------------------


def clean_tables(cfg: AppConfig) -> None:
    save(
        ledger_table(
            ev("RUN_STARTED", 0),
            checkpoint(1, 1, {0: 10, 1: 5}),
            checkpoint(2, 10, {0: 20, 1: 8}),
            ev("CHECKPOINT_SNAPSHOT", 20, cp=3, offsets={0: 25, 1: 9}),  # in flight: exempt
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(3, 0, 10), gc(3, 1, 5), gc(12, 0, 20), gc(12, 1, 8)), cfg, "group_commits")
    benign_gap = finding("f2", finding_type="GAP", severity="critical", status="benign")
    save(frame([finding("f1"), benign_gap], FINDINGS_SCHEMA), cfg, "findings")
    save(frame([summary(), summary(partition=1, commit_lag_offsets=3)], PARTITION_SUMMARY_SCHEMA),
         cfg, "partition_summary")  # fmt: skip
    save(frame([window(0, 0), window(1, 0)], COMPLETENESS_SCHEMA), cfg, "completeness")


def test_clean_tables_pass_every_suite_and_the_report_shows_them(spark: SparkSession, cfg: AppConfig) -> None:
    clean_tables(cfg)

    result = q.run_checks(spark, cfg, "check-clean", now=at(200))

    assert [(s.name, s.skipped, s.success) for s in result.suites] == [
        (s.name, None, True) for s in result.suites
    ]
    assert result.failed() == []
    stored = spark.read.format("delta").load(results_path(cfg))
    assert stored.count() == len(result.outcomes) > 30
    assert rows_of(stored, "run_id", "success") == {("check-clean", True)}
    assert result.data_docs is not None
    assert Path(result.data_docs.removeprefix("file://")).is_file()

    check_io.write_results(
        AuditTables.from_config(cfg, spark).validation_results, result
    )  # the same run id again: replaced

    assert spark.read.format("delta").load(results_path(cfg)).count() == len(result.outcomes)

    # The dashboard reads the same tables; restarts come from forensics, seeded here.
    restart = dict(
        job_name=JOB, run_id="run-2", previous_run_id="run-1", started_at=at(30), group_id=GROUP, topic=TOPIC,
        partition=0, resumed_offset=15, resume_source="group", previous_checkpoint_offset=20,
        group_committed_offset=15, classification="replay", records_replayed=5, records_skipped=0,
        duplicates_observed=5, forensics_run_id="fx-1",
    )  # fmt: skip
    save(frame([restart], RESTARTS_SCHEMA), cfg, "restarts")

    tables = AuditTables.from_config(cfg, spark)
    html = report_io.build_report(tables, cfg, "report-1", now=at(400))
    data = report_io.gather(tables, cfg, "report-1", html, now=at(400))

    assert html == Path(cfg.paths.under("report", "index.html"))
    assert html.read_text().count('class="chart"') == len(report.CHART_IDS)
    assert [r["finding_id"] for r in data.findings] == ["f1"]  # the benign gap is not open
    assert {(r["partition"], r["completeness"]) for r in data.completeness} == {(0, 1.0), (1, 1.0)}
    assert data.groups == [
        {
            "group_id": GROUP,
            "lag_offsets": 3,
            "lag_seconds": 0,
            "completed": 2,
            "skipped": 0,
            "skip_rate": 0.0,
        }
    ]
    assert [(r["run_id"], r["classification"], r["replayed"]) for r in data.restarts] == [
        ("run-2", "replay", 5)
    ]
    assert [(w["row"], w["window_start"], w["completeness"]) for w in data.windows] == [
        (f"{JOB} {TOPIC}/0", "2026-03-01 12:00", 1.0),
        (f"{JOB} {TOPIC}/1", "2026-03-01 12:00", 1.0),
    ]
    assert data.check_run_id == "check-clean"
    assert {c["suite"]: c["failed"] for c in data.checks}["ledger"] == 0
    assert data.data_docs_href == "../data_docs/index.html"


def seeded_tables(cfg: AppConfig) -> None:
    """One violation of every expectation that can fail on these tables."""
    bogus = ev("RUN_STOPPED", 40)[0].to_row() | {"event_type": "RUN_PAUSED"}
    negative = ev("OFFSETS_RESTORED", 1, offsets={1: 0})[0].to_row() | {"offset": -4}
    nameless = ev("RUN_STARTED", 50, run="run-2")[0].to_row() | {"job_name": None}
    events = [
        *ev("RUN_STARTED", 0),
        *ev("CHECKPOINT_SNAPSHOT", 1, cp=1, offsets={0: 10}),  # snapshot that never completed
        *checkpoint(2, 10, {0: 20}),
        *checkpoint(2, 10, {0: 20})[:1],  # the same snapshot event written twice
        *ev("CHECKPOINT_SNAPSHOT", 20, cp=3, offsets={0: 25}),
    ]
    save(frame([*(e.to_row() for e in events), bogus, negative, nameless], LEDGER_SCHEMA), cfg, "ledger")
    commits = commits_table(gc(12, 0, 20), gc(30, 0, 26))  # 26 is beyond the completed 20
    duplicate_log_position = commits.slice(0, 1)  # same (log_partition, log_offset) again
    save(pa.concat_tables([commits, duplicate_log_position]), cfg, "group_commits")
    save(
        frame(
            [
                finding("f1", severity="fatal"),
                finding("f1"),
                finding("f2", offset_start=9, offset_end=4),
                finding("g1", finding_type="GAP", severity="critical", status="confirmed"),
            ],
            FINDINGS_SCHEMA,
        ),
        cfg,
        "findings",
    )
    # A commit of 25 beyond the checkpoint's 20: the commit check reads it from the summary.
    bad = summary(commit_lag_offsets=50_000, sink_count=19, last_committed_offset=25)
    save(frame([bad], PARTITION_SUMMARY_SCHEMA), cfg, "partition_summary")
    lossy = window(1, 600, landed=65, lost=35, completeness=0.65)
    save(frame([window(0, 0), lossy], COMPLETENESS_SCHEMA), cfg, "completeness")


def test_seeded_violations_fail_the_expectation_that_guards_them(spark: SparkSession, cfg: AppConfig) -> None:
    seeded_tables(cfg)

    result = q.run_checks(spark, cfg, "check-bad", now=at(200), options=q.CheckOptions(build_docs=False))

    failed = {(e.suite, e.label, e.severity) for e in result.failed()}
    assert failed == {
        ("ledger", "expect_column_values_to_not_be_null(job_name)", "error"),
        ("ledger", "expect_column_values_to_be_in_set(event_type)", "error"),
        ("ledger", "expect_column_values_to_be_between(offset)", "error"),
        ("ledger", f"expect_compound_columns_to_be_unique({list(LEDGER_IDENTITY)})", "error"),
        ("ledger.checkpoint_completion",
         "expect_column_values_to_be_null(snapshot_without_completion)", "error"),
        ("group_commits", "expect_compound_columns_to_be_unique(['log_partition', 'log_offset'])", "error"),
        ("group_commits.within_checkpoints",
         "expect_column_pair_values_a_to_be_greater_than_b(completed_offset >= committed_offset)",
         "critical"),
        ("findings", "expect_column_values_to_be_in_set(severity)", "error"),
        ("findings", "expect_column_values_to_be_unique(finding_id)", "error"),
        ("findings", "expect_column_pair_values_a_to_be_greater_than_b(offset_end >= offset_start)", "error"),
        ("findings.confirmed_gaps", "expect_table_row_count_to_be_between", "error"),
        ("partition_summary", "expect_column_pair_values_a_to_be_greater_than_b(sink_count >= sink_distinct)",
         "error"),
        ("partition_summary", "expect_column_values_to_be_between(commit_lag_offsets)", "warn"),
        ("completeness.floor", "expect_column_values_to_be_null(window_below_floor)", "error"),
    }  # fmt: skip
    assert {e.label for e in result.failed("error")} == {e.label for e in result.failed()} - {
        "expect_column_values_to_be_between(commit_lag_offsets)"
    }
    missing = next(e for e in result.failed() if e.suite == "ledger.checkpoint_completion")
    assert missing.observed["partial_unexpected_list"] == [f"{JOB}/run-1/1"]
    gaps = next(e for e in result.failed() if e.suite == "findings.confirmed_gaps")
    assert gaps.observed["observed_value"] == 1
    stored = spark.read.format("delta").load(results_path(cfg)).where("not success")
    assert stored.count() == len(failed)
    assert all(json.loads(r.observed) for r in stored.collect())


def test_a_final_window_under_the_completeness_floor_fails_naming_it_a_provisional_one_passes(
    spark: SparkSession, cfg: AppConfig
) -> None:
    def floor_check(rows: list[dict[str, Any]], floor: float = 1.0, route: int = 10_000) -> Any:
        save(frame(rows, COMPLETENESS_SCHEMA), cfg, "completeness")
        checked = build_config(data_dir=cfg.paths.data_dir, completeness={"floor": floor})
        options = q.CheckOptions(build_docs=False, write_results=False, driver_max_rows=route)
        result = q.run_checks(spark, checked, "check-floor", now=at(4000), options=options)
        return next(e for e in result.outcomes if e.suite == "completeness.floor")

    unknown = window(2, 600, sink_mode="delta_batches", landed=None, completeness=None, lost=40)
    provisional = window(1, 1200, final=False, landed=40, pending=60, completeness=0.4)
    lossy = window(1, 600, landed=65, lost=35, completeness=0.65)

    passing = floor_check([window(0, 0), provisional, unknown])
    on_driver = floor_check([window(0, 0), lossy, provisional, unknown])
    on_spark = floor_check([window(0, 0), lossy, provisional, unknown], route=0)
    lower_floor = floor_check([window(0, 0), lossy, provisional, unknown], floor=0.6)

    assert passing.success
    assert passing.observed["element_count"] == 1  # the provisional and the unknown are not judged
    for failed in (on_driver, on_spark):
        assert not failed.success
        assert failed.severity == "error"
        assert failed.observed["partial_unexpected_list"] == [f"{JOB}/{TOPIC}/1/2026-03-01 12:10:00"]
    assert lower_floor.success


def test_missing_tables_skip_their_suites_instead_of_failing(spark: SparkSession, cfg: AppConfig) -> None:
    save(commits_table(gc(3, 0, 10)), cfg, "group_commits")

    result = q.run_checks(spark, cfg, "check-empty", options=q.CheckOptions(build_docs=False))

    assert {s.name: s.skipped is None for s in result.suites} == {
        "ledger": False,
        "ledger.checkpoint_completion": False,
        "group_commits": True,
        "group_commits.within_checkpoints": False,
        "findings": False,
        "findings.confirmed_gaps": False,
        "partition_summary": False,
        "completeness.floor": False,
    }
    assert result.failed() == []


def test_driver_and_spark_validation_give_the_same_outcomes(spark: SparkSession, cfg: AppConfig) -> None:
    seeded_tables(cfg)
    small = q.CheckOptions(build_docs=False, write_results=False)  # every frame fits on the driver
    large = dataclasses.replace(small, driver_max_rows=0)  # every frame too large: GE on Spark

    on_driver = q.run_checks(spark, cfg, "check-driver", now=at(200), options=small)
    on_spark = q.run_checks(spark, cfg, "check-spark", now=at(200), options=large)

    def outcomes(summary: CheckSummary) -> list[tuple[Any, ...]]:
        return [
            (e.suite, e.label, e.severity, e.success, json.dumps(e.observed, sort_keys=True))
            for e in summary.outcomes
        ]

    assert len(on_driver.outcomes) > 30
    assert not all(e.success for e in on_driver.outcomes)
    assert outcomes(on_driver) == outcomes(on_spark)


def test_only_tables_within_the_driver_limit_are_read_on_the_driver(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "small")
    write_deltalake(path, pa.table({"n": pa.array([None, 2], pa.int64()), "b": pa.array([None, True])}))

    small = open_handle("findings", path, spark)  # any table: the read names no column
    read = check_io.read_for_check(small, max_rows=2)

    assert isinstance(read, pa.Table)
    local = frames.as_pandas(read)
    assert local["n"].isna().tolist() == [True, False]
    assert local["n"].iloc[1] == 2
    assert str(local["n"].dtype) == "Int64"  # not float64: a null keeps integers integral
    assert local["b"].isna().tolist() == [True, False]
    assert isinstance(check_io.read_for_check(small, max_rows=1), DataFrame)
    assert isinstance(check_io.read_for_check(small, max_rows=0), DataFrame)
    assert check_io.read_for_check(small.at(str(tmp_path / "none")), max_rows=2) is None


def test_a_check_reads_only_the_partition_summaries_of_the_run_it_judges_on_either_engine(
    spark: SparkSession, cfg: AppConfig
) -> None:
    rows = [summary(reconcile_run_id=r, partition=p) for r in ("rec-1", "rec-2", "it's") for p in (0, 1)]
    save(frame(rows, PARTITION_SUMMARY_SCHEMA), cfg, "partition_summary")
    summaries = AuditTables.from_config(cfg, spark).partition_summary

    for max_rows in (1000, 0):  # the driver's DuckDB, then Spark SQL: the same text
        for run, expected in (("rec-2", {"rec-2"}), ("it's", {"it's"}), (None, {"rec-1", "rec-2", "it's"})):
            read = check_io.read_for_check(summaries, max_rows, check_io.summary_rows_of_run(run))
            assert read is not None
            got = ordered_rows(read, "reconcile_run_id", "partition")
            assert {r for r, _ in got} == expected, (max_rows, run)
            assert len(got) == 2 * len(expected)
