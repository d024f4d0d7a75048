"""The driver-side tables on s3a:// take the same delta-rs path as on local disk: written, MERGEd,
appended and deleted from through the settings of config `storage.options` (credentials as
${ENV}), and read back by Spark's s3a connector as the same rows. No credential shows in an error
or a log line.

The scenario runs in a child process with its own local Spark session, because that session needs
the s3a connector's jars, which the tests' shared session does not carry (one JVM per process).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.runtime.child_processes import parent_death_preexec
from app.runtime.jvm import REPO_ROOT
from tests.cluster.servers import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, S3Server
from tests.ledger_data import finding_row

pytestmark = pytest.mark.cluster

SCENARIO_TIMEOUT_S = 900.0  # a JVM start and three Spark jobs on s3a, on a busy two-core machine
T1 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T2 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
# config `storage.options` for an S3 API server on plain HTTP, secrets from the environment.
STORAGE_OPTIONS = {
    "fs.s3a.endpoint": "${S3_ENDPOINT}",
    "fs.s3a.endpoint.region": S3_REGION,
    "fs.s3a.path.style.access": "true",
    "fs.s3a.connection.ssl.enabled": "false",
    "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "fs.s3a.access.key": "${S3_ACCESS_KEY}",
    "fs.s3a.secret.key": "${S3_SECRET_KEY}",
}
FINDING_COLUMNS = ["finding_id", "reconcile_run_id", "detected_at", "status", "record_count"]


def plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as JSON-able values in a stable order: times as UTC ISO text."""

    def value(v: Any) -> Any:
        if isinstance(v, datetime):
            return (v if v.tzinfo else v.astimezone(UTC)).astimezone(UTC).isoformat()
        return v if v is None or isinstance(v, (int, str, float, bool)) else str(v)

    return sorted(
        ({k: value(v) for k, v in r.items()} for r in rows), key=lambda r: json.dumps(r, sort_keys=True)
    )


def scenario(root: str, missing_bucket_root: str, out: str) -> None:
    """The child's part: every driver-side operation on ``root`` (s3a://), each table read back by
    delta-rs and by Spark; results as JSON in ``out``."""
    from app.config import load_config
    from app.contracts.offsets import EventSource
    from app.contracts.tables import AUDIT_RUNS_SCHEMA, FINDINGS_SCHEMA
    from app.contracts.vocabulary import ENGINE_SPARK, EVENT_CHECKPOINT_SNAPSHOT
    from app.errors import InfrastructureError
    from app.reconcile import findings as rc
    from app.reconcile.inputs import read_ledger_rows
    from app.runtime import jvm
    from app.runtime.spark import build_spark_session
    from app.storage import delta_rows
    from app.stream.ledger import LedgerWriter

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    cfg = load_config("local", overrides=[f"storage.options.{k}={v}" for k, v in STORAGE_OPTIONS.items()])
    spark = build_spark_session(
        dataclasses.replace(cfg.spark, mode="local", master="local[1]"),
        jvm.spark_extra_jars() + jvm.resolve_classpath("s3"),
        warehouse_dir=str(Path(out).parent / "warehouse"),
        environ={},
        storage_options=cfg.storage.options,
    )

    def spark_rows(path: str, columns: list[str]) -> list[dict[str, Any]]:
        return [r.asDict() for r in spark.read.format("delta").load(path).select(*columns).collect()]

    result: dict[str, Any] = {}
    findings = f"{root}/findings"
    first = [finding_row("a", "rec-1", T1), finding_row("b", "rec-1", T1)]
    second = [
        finding_row("a", "rec-2", T2, status="confirmed", record_count=6),
        finding_row("c", "rec-2", T2),
    ]
    for rows in (first, second, []):  # no rows, no commit
        delta_rows.merge_rows(spark, findings, FINDINGS_SCHEMA, rows, "finding_id", keep=("detected_at",))
    delta_rows.delete_where_in(spark, findings, "reconcile_run_id", ["rec-1"])
    result["findings_delta_rs"] = plain(delta_rows.read_columns(spark, findings, FINDING_COLUMNS) or [])
    result["findings_spark"] = plain(spark_rows(findings, FINDING_COLUMNS))

    runs = f"{root}/audit_runs"
    run = dict(
        run_id="rec-2", command="reconcile", jobs="[]", window_start=T1, window_end=T2, started_at=T2,
        finished_at=T2, status="succeeded",
    )  # fmt: skip
    delta_rows.append_rows(spark, runs, AUDIT_RUNS_SCHEMA, [run])
    delta_rows.append_rows(spark, runs, AUDIT_RUNS_SCHEMA, [])
    result["runs_delta_rs"] = plain(
        delta_rows.read_columns(spark, runs, ["run_id", "window_start", "status"]) or []
    )

    # The ledger as the streaming job keeps it: Spark creates it (append-only, partitioned), the
    # micro-batches append through delta-rs, a retried batch writes nothing.
    ledger = f"{root}/ledger"
    ledger_writer = LedgerWriter(spark, ledger, "orders-job", "run-1", scope="query-1")
    ledger_writer.ensure()
    writer = EventSource("orders-job", "run-1", ENGINE_SPARK, "orders-group")
    batches = [
        writer.partition_events(
            EVENT_CHECKPOINT_SNAPSHOT, T1 + timedelta(days=i), i, {("orders", 0): 10 + 10 * i}, {}
        )
        for i in range(2)
    ]
    for batch_id in (0, 1, 1, 0):
        ledger_writer.write(batches[batch_id], batch_id)
    columns = ["run_id", "checkpoint_id", "event_date", "offset"]
    window = rc.AuditWindow(until=T2 + timedelta(days=1), since=None)
    result["ledger_delta_rs"] = plain(
        read_ledger_rows(spark, ledger, window, [], 0).select(columns).to_pylist()
    )
    result["ledger_spark"] = plain(spark_rows(ledger, columns))

    try:
        delta_rows.merge_rows(spark, f"{missing_bucket_root}/findings", FINDINGS_SCHEMA, [], "finding_id")
        result["error"] = None
    except InfrastructureError as exc:
        chain = [str(exc)]
        cause = exc.__cause__
        while cause is not None:
            chain.append(str(cause))
            cause = cause.__cause__
        result["error"] = "\n".join(chain)
    Path(out).write_text(json.dumps(result))
    spark.stop()


def run_scenario(s3: S3Server, tmp_path: Path) -> tuple[dict[str, Any], str]:
    root = f"s3a://{s3.bucket}/storage-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYSPARK_", "SPARK_"))}
    env.update(S3_ENDPOINT=s3.endpoint, S3_ACCESS_KEY=S3_ACCESS_KEY, S3_SECRET_KEY=S3_SECRET_KEY)
    code = (
        "import sys; from tests.cluster.test_storage_on_s3 import scenario; "
        "scenario(sys.argv[1], sys.argv[2], sys.argv[3])"
    )
    log = tmp_path / "scenario.log"
    with log.open("w") as sink:
        child = subprocess.Popen(
            [sys.executable, "-c", code, root, "s3a://no-such-bucket-for-the-audit/t", str(out)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=parent_death_preexec(),
        )
        try:
            returncode = child.wait(timeout=SCENARIO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise AssertionError(
                f"the scenario took over {SCENARIO_TIMEOUT_S:.0f}s:\n{log.read_text()[-4000:]}"
            ) from None
    output = log.read_text()
    assert returncode == 0, output[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result, output


@pytest.mark.timeout(1200)
def test_delta_rs_writes_on_s3a_are_read_back_by_spark_as_the_same_rows_and_no_secret_is_shown(
    s3_server: S3Server, tmp_path: Path
) -> None:
    result, output = run_scenario(s3_server, tmp_path)

    # MERGE kept the first detection time and updated the rest; the delete took rec-1's rows.
    assert result["findings_delta_rs"] == [
        {"detected_at": T1.isoformat(), "finding_id": "a", "reconcile_run_id": "rec-2", "record_count": 6,
         "status": "confirmed"},
        {"detected_at": T2.isoformat(), "finding_id": "c", "reconcile_run_id": "rec-2", "record_count": 5,
         "status": "open"},
    ]  # fmt: skip
    assert result["findings_spark"] == result["findings_delta_rs"]
    assert result["runs_delta_rs"] == [
        {"run_id": "rec-2", "status": "succeeded", "window_start": T1.isoformat()}
    ]

    # One row per event: the retried batches wrote nothing.
    assert result["ledger_delta_rs"] == [
        {"checkpoint_id": 0, "event_date": "2026-03-01", "offset": 10, "run_id": "run-1"},
        {"checkpoint_id": 1, "event_date": "2026-03-02", "offset": 20, "run_id": "run-1"},
    ]
    assert result["ledger_spark"] == result["ledger_delta_rs"]

    # A storage failure names the table, and neither it nor any log line carries a credential.
    assert "no-such-bucket-for-the-audit" in result["error"]
    for secret in (S3_SECRET_KEY, S3_ACCESS_KEY):
        assert secret not in result["error"]
        assert secret not in output
    assert "storage options set: fs.s3a." in output  # the option names are logged, and only those
