"""reconcile under `spark-submit --master spark://...` with every table on s3a:// finds exactly what
the same run finds on local disk, and its sink scan runs in the workers' executors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from app.cli import main
from tests.cluster import scenario
from tests.cluster.conftest import S3_SECRET_KEY, S3Server, SparkCluster
from tests.cluster.submit import event_log, executors_added, read_table, spark_submit, tasks_scanning

pytestmark = pytest.mark.cluster

FINDING_COLUMNS = (
    "finding_id", "finding_type", "severity", "status", "job_name", "group_id", "topic", "partition",
    "checkpoint_id", "run_id", "offset_start", "offset_end", "record_count",
)  # fmt: skip
SUMMARY_COLUMNS = (
    "job_name", "group_id", "topic", "partition", "sink_count", "sink_distinct", "sink_min_offset",
    "sink_max_offset", "last_checkpoint_id", "last_checkpoint_offset", "last_committed_offset",
    "commit_lag_offsets", "findings_by_type",
)  # fmt: skip


def rows(table: Any, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r[c] for c in columns) for r in table.select(list(columns)).to_pylist()),
        key=lambda t: tuple((v is None, str(v)) for v in t),
    )


@pytest.mark.timeout(900)  # a cluster's start and a spark-submit on a busy two-core machine
def test_reconcile_on_the_cluster_over_s3a_finds_what_it_finds_locally_with_tasks_on_the_workers(
    spark_cluster: SparkCluster,
    s3_server: S3Server,
    cluster_jars: list[Path],
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    local_data = tmp_path / "local"
    scenario.write_scenario(local_data)
    uploaded = scenario.upload_tree(
        local_data / "tables", s3_server.client(), s3_server.bucket, "reconcile/tables"
    )
    assert uploaded > 0
    s3_data = f"s3a://{s3_server.bucket}/reconcile"
    args = ["--until", scenario.UNTIL.isoformat(), "--no-confirm", "--run-id", "cluster-reconcile", "--json"]

    with spark_submit(
        spark_cluster, s3_server, cluster_jars, "reconcile",
        [*args, "--set", f"paths.data_dir={s3_data}"], tmp_path,
    ) as running:  # fmt: skip
        # Meanwhile, the same entry point on local disk in this process's local session (tests/conftest.py).
        capsys.readouterr()
        local_code = main(["reconcile", *args, "--set", f"paths.data_dir={local_data}"])
        local_summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        on_cluster = running.finish()

    assert on_cluster.returncode in (0, 1), on_cluster.stderr[-6000:]
    assert on_cluster.returncode == local_code
    summary = on_cluster.summary()
    for key in ("findings", "incidents", "failing_findings", "gaps_suspected", "partitions", "jobs"):
        assert summary[key] == local_summary[key], key

    found = rows(read_table(f"{s3_data}/tables/findings", s3_server), FINDING_COLUMNS)
    expected = rows(read_table(str(local_data / "tables" / "findings")), FINDING_COLUMNS)
    assert found == expected
    by_type = {(r[1], r[7], r[10], r[11]) for r in found}
    assert ("GAP", 1, 200, 250) in by_type
    assert any(t == "DUPLICATE" and p == 2 for t, p, _, _ in by_type)
    assert rows(read_table(f"{s3_data}/tables/partition_summary", s3_server), SUMMARY_COLUMNS) == rows(
        read_table(str(local_data / "tables" / "partition_summary")), SUMMARY_COLUMNS
    )

    # The credentials reached the executors through config alone, and were never written out.
    written = on_cluster.stdout + on_cluster.stderr + json.dumps(event_log(on_cluster.event_log_dir))
    assert S3_SECRET_KEY not in written

    executors = executors_added(on_cluster.event_log_dir)
    scans = tasks_scanning(on_cluster.event_log_dir, f"{s3_data}/tables/sink")
    assert scans, "no task scanned the sink"
    assert "driver" not in executors
    assert {t.executor_id for t in scans} <= set(executors), (scans, executors)
