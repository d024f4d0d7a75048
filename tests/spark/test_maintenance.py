"""`maintain` over real Delta tables (delta-rs writes them as the job and the audit do; Spark reads
them back as every Spark reader would): closed days compacted while the job appends, the audit
tables compacted and aged out while a watch MERGEs findings, retention that keeps what an open
incident cites, partition summaries aged by their reconcile runs, time travel within the VACUUM
retention."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Self

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from app.contracts.tables import (
    AUDIT_RUNS_SCHEMA,
    COMPLETENESS_SCHEMA,
    FINDINGS_SCHEMA,
    INCIDENTS_SCHEMA,
    PARTITION_SUMMARY_SCHEMA,
)
from app.maintenance.run import maintain
from app.storage import delta_rows
from app.storage.tables import tables_from_config
from app.stream.ledger import LedgerWriter
from tests.support.config import build_config
from tests.support.ledger_data import JOB, T0, checkpoint, finding_row, incident_row
from tests.support.maintenance import FILES_PER_DAY, NOW, files_per_day, write_days

pytestmark = pytest.mark.spark

APPENDER_TIMEOUT_S = 120  # a deadline for the live writers' commits, not a speed check


def rows_per_day(spark: SparkSession, path: str) -> dict[str, int]:
    rows = spark.read.format("delta").load(path).groupBy("event_date").count().collect()
    return {r["event_date"].isoformat(): r["count"] for r in rows}


class LiveWriter:
    """A writer committing to a table from its own thread, one commit after another as fast as it
    can, until told to stop; what one commit would raise in the real process ends it."""

    def __init__(self) -> None:
        self.written = 0
        self.errors: list[BaseException] = []
        self.commits = threading.Condition()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def commit(self, n: int) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stopping.is_set():
            n = self.written + 1
            try:
                self.commit(n)
            except BaseException as exc:  # what would fail the job's micro-batch or the watch's cycle
                self.errors.append(exc)
                with self.commits:
                    self.commits.notify_all()
                return
            with self.commits:
                self.written = n
                self.commits.notify_all()

    def wait_for(self, count: int) -> None:
        with self.commits:
            assert self.commits.wait_for(
                lambda: self.written >= count or bool(self.errors), APPENDER_TIMEOUT_S
            ), f"{type(self).__name__} committed {self.written} times in {APPENDER_TIMEOUT_S}s"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(APPENDER_TIMEOUT_S)


class LiveJob(LiveWriter):
    """The streaming job appending micro-batches to today's ledger partition, as `stream.job` does
    through the same writer."""

    def __init__(self, ledger: str) -> None:
        super().__init__()
        self.writer = LedgerWriter(None, ledger, JOB, "run-live", scope="live")

    def commit(self, n: int) -> None:
        events = checkpoint(n, (NOW - T0).total_seconds() + n, {0: 10 * n, 1: 10 * n}, run="run-live")
        self.writer.write(events, n)


def test_closed_days_are_compacted_while_the_job_appends_and_no_event_is_lost(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = build_config(data_dir=tmp_path)
    ledger = tables_from_config(cfg).ledger
    expired, closed = [date(2026, 2, 1)], [date(2026, 3, 16), date(2026, 3, 17), date(2026, 3, 18)]
    write_days(ledger, expired + closed)
    before = rows_per_day(spark, ledger)

    with LiveJob(ledger) as job:
        job.wait_for(3)  # the job is appending before the maintenance starts
        started_with = job.written
        result = maintain(None, cfg, NOW)
        job.wait_for(job.written + 3)  # and goes on after it
    assert job.errors == []
    assert job.written > started_with  # its appends overlapped the maintenance

    (outcome,) = [t for t in result.tables if t.table == "ledger"]
    assert sorted(outcome.compacted) == [d.isoformat() for d in closed]
    files = files_per_day(ledger)
    assert {d.isoformat(): files[d.isoformat()] for d in closed} == {d.isoformat(): 1 for d in closed}
    after = rows_per_day(spark, ledger)
    # The closed days hold the same rows in one file each; the expired day is gone; every batch the
    # job wrote, before, during and after the maintenance, is there (4 events x 2 partitions each).
    assert {d: after[d] for d in before if d != "2026-02-01"} == {
        d: before[d] for d in before if d != "2026-02-01"
    }
    assert "2026-02-01" not in after
    live = spark.read.format("delta").load(ledger).where("run_id = 'run-live'")
    assert live.count() == job.written * 8
    assert live.select("checkpoint_id").distinct().count() == job.written
    assert DeltaTable(ledger).metadata().configuration["delta.appendOnly"] == "true"


def test_retention_keeps_what_an_open_incident_cites_until_it_is_resolved(
    spark: SparkSession, tmp_path: Path
) -> None:
    retention = ("maintenance.retention_days.findings=30", "maintenance.retention_days.incidents=30")
    cfg = build_config(*retention, data_dir=tmp_path)
    tables = tables_from_config(cfg)
    # The open incident's evidence starts on 01-12; a night looks 7 days back for its baseline.
    evidence = datetime(2026, 1, 12, 10, tzinfo=UTC)
    write_days(tables.ledger, [date(2026, 1, 1), date(2026, 1, 5), date(2026, 2, 1), date(2026, 3, 10)])
    old = evidence
    delta_rows.merge_rows(None, tables.findings, FINDINGS_SCHEMA, [
        finding_row("f-cited", "rec-1", old), finding_row("f-uncited", "rec-0", old),
        finding_row("f-new", "rec-2", NOW - timedelta(days=1)),
    ], "finding_id")  # fmt: skip
    delta_rows.merge_rows(None, tables.incidents, INCIDENTS_SCHEMA, [
        incident_row("i-open", "open", evidence, evidence, ["f-cited"]),
        incident_row("i-resolved", "resolved", old, old, ["f-uncited"]),
    ], "incident_id")  # fmt: skip

    maintain(None, cfg, NOW)

    def ids(path: str, column: str) -> list[str]:
        return sorted(r[column] for r in spark.read.format("delta").load(path).select(column).collect())

    assert sorted(rows_per_day(spark, tables.ledger)) == ["2026-01-05", "2026-02-01", "2026-03-10"]
    assert ids(tables.findings, "finding_id") == ["f-cited", "f-new"]
    assert ids(tables.incidents, "incident_id") == ["i-open"]

    # Once resolved, the incident and what it cited age out like the rest.
    delta_rows.merge_rows(None, tables.incidents, INCIDENTS_SCHEMA, [
        incident_row("i-open", "resolved", evidence, evidence, ["f-cited"]),
    ], "incident_id")  # fmt: skip
    maintain(None, cfg, NOW)
    assert sorted(rows_per_day(spark, tables.ledger)) == ["2026-03-10"]
    assert ids(tables.findings, "finding_id") == ["f-new"]
    assert ids(tables.incidents, "incident_id") == []


def test_time_travel_to_a_version_within_the_vacuum_retention_still_works_after_maintenance(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = build_config(data_dir=tmp_path)
    tables = tables_from_config(cfg)
    write_days(tables.ledger, [date(2026, 3, 16), date(2026, 3, 17)])
    for n in range(FILES_PER_DAY):  # one file per merge: a table worth compacting
        delta_rows.merge_rows(
            None, tables.findings, FINDINGS_SCHEMA, [finding_row(f"f-{n}", "rec-1", NOW)], "finding_id"
        )
    versions = {path: DeltaTable(path).version() for path in (tables.ledger, tables.findings)}
    before = {path: sorted(map(tuple, spark.read.format("delta").load(path).collect())) for path in versions}

    result = maintain(None, cfg, NOW)
    assert {t.table: t.files_compacted > 0 for t in result.tables if t.table in ("ledger", "findings")} == {
        "ledger": True,
        "findings": True,
    }

    for path, version in versions.items():
        assert DeltaTable(path).version() > version  # the compaction is a new version
        old = spark.read.format("delta").option("versionAsOf", version).load(path)
        assert sorted(map(tuple, old.collect())) == before[path]
        assert DeltaTable(path, version=version).to_pyarrow_table().num_rows == len(before[path])


def completeness_row(window_end: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: None for f in COMPLETENESS_SCHEMA.fields}
    row.update(
        job_name=JOB,
        topic="orders",
        partition=0,
        window_start=window_end - timedelta(minutes=10),
        window_end=window_end,
        sink_mode="append",
        final=True,
        computed_at=window_end,
        reconcile_run_id="rec-1",
    )
    return row


COMPLETENESS_KEY = ("job_name", "topic", "partition", "window_start")


class LiveWatch(LiveWriter):
    """A watch's cycles MERGEing findings, one after another: each upserts the finding it found
    new and judges again one it found before (a matched row: the MERGE rewrites that row's file,
    which is what races a compaction or a deletion of the same files)."""

    def __init__(self, findings: str, earlier: list[str]) -> None:
        super().__init__()
        self.path = findings
        self.earlier = earlier
        self.merged: dict[str, str] = {}  # finding_id -> reconcile_run_id of its last MERGE

    def commit(self, n: int) -> None:
        run = f"watch-{n}"
        ids = [f"f-live-{n}", self.earlier[n % len(self.earlier)]]
        rows = [finding_row(i, run, NOW, record_count=n) for i in ids]
        delta_rows.merge_rows(None, self.path, FINDINGS_SCHEMA, rows, "finding_id", keep=("detected_at",))
        self.merged.update(dict.fromkeys(ids, run))


def test_the_audit_tables_are_compacted_and_aged_out_while_a_watch_merges_and_no_row_is_lost(
    tmp_path: Path,
) -> None:
    cfg = build_config(data_dir=tmp_path)  # findings, incidents and completeness keep 400 days
    tables = tables_from_config(cfg)
    old, recent = NOW - timedelta(days=500), NOW - timedelta(days=1)
    earlier = [f"f-{n}" for n in range(FILES_PER_DAY)]
    for n in range(FILES_PER_DAY):  # one file per MERGE: each table is worth compacting
        for when, suffix in ((recent, ""), (old, "-old")):  # the old rows in files of their own
            delta_rows.merge_rows(None, tables.findings, FINDINGS_SCHEMA, [
                finding_row(f"f{suffix}-{n}", "rec-1", when),
            ], "finding_id")  # fmt: skip
            delta_rows.merge_rows(None, tables.incidents, INCIDENTS_SCHEMA, [
                incident_row(f"i{suffix}-{n}", "resolved", when, when, [f"f{suffix}-{n}"]),
            ], "incident_id")  # fmt: skip
            delta_rows.merge_rows(None, tables.completeness, COMPLETENESS_SCHEMA, [
                completeness_row(when + timedelta(minutes=10 * n)),
            ], COMPLETENESS_KEY)  # fmt: skip
    audit = ["findings", "incidents", "completeness"]

    with LiveWatch(tables.findings, earlier) as watch:
        watch.wait_for(3)  # the watch is merging before the maintenance starts
        started_with = watch.written
        result = maintain(None, cfg, NOW, only=audit)
        ended_with = watch.written
        watch.wait_for(ended_with + 3)  # and goes on after it
    assert watch.errors == []
    assert ended_with > started_with  # its MERGEs overlapped the maintenance

    outcomes = {t.table: t for t in result.tables}
    assert {t: (outcomes[t].compacted, outcomes[t].rows_deleted) for t in audit} == {
        t: ([""], FILES_PER_DAY) for t in audit
    }
    assert all(outcomes[t].files_compacted >= FILES_PER_DAY for t in audit)
    assert "OPTIMIZE" in [h["operation"] for h in DeltaTable(tables.findings).history()]
    # Every finding as its last MERGE left it, the watch's before, during and after the maintenance;
    # the old ones gone.
    stored = DeltaTable(tables.findings).to_pyarrow_table(columns=["finding_id", "reconcile_run_id"])
    expected = {f: "rec-1" for f in earlier} | watch.merged
    assert {r["finding_id"]: r["reconcile_run_id"] for r in stored.to_pylist()} == expected


def summary_rows(runs: list[str], partitions: int = 2) -> list[dict[str, Any]]:
    """What a reconcile run appends to partition_summary: one row per partition of job-a's topic."""
    return [
        {
            "reconcile_run_id": run,
            "job_name": JOB,
            "topic": "orders",
            "partition": p,
            "findings_by_type": "{}",
        }
        for run in runs
        for p in range(partitions)
    ]


def reconcile_runs(runs: dict[str, datetime]) -> list[dict[str, Any]]:
    return [
        {"run_id": run, "command": "reconcile", "window_end": at, "started_at": at, "finished_at": at,
         "status": "succeeded"}
        for run, at in runs.items()
    ]  # fmt: skip


def summary_runs(path: str) -> set[str]:
    return {r["reconcile_run_id"] for r in delta_rows.read_columns(None, path, ["reconcile_run_id"]) or []}


def deletions(path: str) -> int:
    return sum(1 for h in DeltaTable(path).history() if h["operation"] == "DELETE")


def test_partition_summary_keeps_the_rows_of_recent_latest_and_unfinished_runs_only(tmp_path: Path) -> None:
    # audit_runs ages out on the same night: its old rows go, but they date the summaries first.
    cfg = build_config("maintenance.retention_days.audit_runs=30", data_dir=tmp_path)
    tables = tables_from_config(cfg)
    assert cfg.maintenance.retention_days.partition_summary == 30  # cutoff 2026-02-18
    # A watch's runs of a day long ago, more than one deletion's worth; the latest run is old too.
    old = {f"rec-{n:04d}": datetime(2026, 1, 10, tzinfo=UTC) + timedelta(minutes=n) for n in range(1100)}
    delta_rows.append_rows(None, tables.audit_runs, AUDIT_RUNS_SCHEMA, reconcile_runs(old))
    delta_rows.append_rows(
        None,
        tables.audit_runs,
        AUDIT_RUNS_SCHEMA,
        reconcile_runs({"rec-last": datetime(2026, 1, 20, tzinfo=UTC)}),
    )
    delta_rows.append_rows(
        None, tables.partition_summary, PARTITION_SUMMARY_SCHEMA, summary_rows([*old, "rec-last"])
    )
    # A run still writing: its summary is in, its audit_runs row not yet.
    delta_rows.append_rows(
        None, tables.partition_summary, PARTITION_SUMMARY_SCHEMA, summary_rows(["rec-running"])
    )

    result = maintain(None, cfg, NOW, only=["audit_runs", "partition_summary"])

    deleted = {t.table: t.rows_deleted for t in result.tables}
    assert deleted == {"audit_runs": 1100, "partition_summary": 2 * 1100}
    assert summary_runs(tables.partition_summary) == {"rec-last", "rec-running"}
    assert deletions(tables.partition_summary) == 3  # 500 + 500 + 100 runs, a commit each

    # The running run finishes (recent): rec-last is no longer the latest and ages out.
    delta_rows.append_rows(
        None, tables.audit_runs, AUDIT_RUNS_SCHEMA, reconcile_runs({"rec-running": NOW - timedelta(hours=1)})
    )
    result = maintain(None, cfg, NOW, only=["partition_summary"])
    assert [t.rows_deleted for t in result.tables] == [2]
    assert summary_runs(tables.partition_summary) == {"rec-running"}

    # Nothing more to delete: no deletion at all.
    before = deletions(tables.partition_summary)
    result = maintain(None, cfg, NOW, only=["partition_summary"])
    assert [t.rows_deleted for t in result.tables] == [0]
    assert deletions(tables.partition_summary) == before
    assert summary_runs(tables.partition_summary) == {"rec-running"}
