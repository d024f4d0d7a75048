"""The driver-side tables on s3a:// take the same delta-rs path as on local disk: written, MERGEd,
appended and deleted from through the settings of config `storage.options` (credentials as
${ENV}), and read back by Spark's s3a connector as the same rows; `maintain` (the CLI) compacts,
deletes, checkpoints and vacuums them there as tests/spark/test_maintenance.py shows it does on
local disk. No credential shows in an error or a log line.

The scenario runs in a child process with its own local Spark session, because that session needs
the s3a connector's jars, which the tests' shared session does not carry (one JVM per process). One
child serves every test here: the JVM start is most of its time. `maintain` runs as the CLI does
for a scheduler, in a grandchild without a JVM (delta-rs with config `storage.options`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.runtime.child_processes import parent_death_preexec
from app.runtime.jvm import REPO_ROOT
from tests.cluster.servers import JVM_OPTIONS, S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, S3Server
from tests.support.ledger_data import JOB, day_events, finding_row, incident_row

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

# The maintained tables, as tests/spark/test_maintenance.py has them on local disk: maintain's clock,
# one ledger file per micro-batch, BATCHES_PER_DAY of them a day (more than the 4 files of
# maintenance.compact_min_files); findings and incidents kept 30 days.
NOW = datetime(2026, 3, 20, 12, 0, tzinfo=UTC)
BATCHES_PER_DAY = 5
SMALL_MERGES = 8  # findings MERGEd one per commit: a table worth compacting
# The open incident's evidence starts here; with a night's 7 days of baseline lookback the ledger is
# kept from 01-05, so 01-10 stays though it is past the ledger's 30 days, and 01-01 goes.
EVIDENCE = datetime(2026, 1, 12, 10, tzinfo=UTC)
EXPIRED_DAY = date(2026, 1, 1)
CLOSED_DAYS = [date(2026, 1, 10), date(2026, 3, 17), date(2026, 3, 18)]
TODAY = NOW.date()
MAINTAIN_OVERRIDES = ["maintenance.retention_days.findings=30", "maintenance.retention_days.incidents=30"]
MAINTAIN_TIMEOUT_S = 300.0
LEDGER_COLUMNS = ["run_id", "checkpoint_id", "event_type", "partition", "offset", "event_date"]
CHECKPOINT_SUFFIX = ".checkpoint.parquet"


def plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as JSON-able values in a stable order: times as UTC ISO text."""

    def value(v: Any) -> Any:
        if isinstance(v, datetime):
            return (v if v.tzinfo else v.astimezone(UTC)).astimezone(UTC).isoformat()
        return v if v is None or isinstance(v, (int, str, float, bool)) else str(v)

    return sorted(
        ({k: value(v) for k, v in r.items()} for r in rows), key=lambda r: json.dumps(r, sort_keys=True)
    )


def storage_overrides() -> list[str]:
    return [f"storage.options.{k}={v}" for k, v in STORAGE_OPTIONS.items()]


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
    from app.storage.handles import open_handle
    from app.stream.ledger import LedgerWriter

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    cfg = load_config("local", overrides=storage_overrides())
    # The tier's fast-starting JVM (servers.JVM_OPTIONS), before the session's own driver options.
    fast_jvm = {**cfg.spark.conf, "spark.driver.defaultJavaOptions": JVM_OPTIONS}
    spark = build_spark_session(
        dataclasses.replace(cfg.spark, mode="local", master="local[1]", conf=fast_jvm),
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
        read_ledger_rows(open_handle("ledger", ledger, spark), window, [], 0).select(columns).to_pylist()
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

    started = time.monotonic()
    result["maintain"] = maintain_scenario(spark, f"{root}/maintained")
    result["maintain"]["seconds"] = round(time.monotonic() - started, 1)
    Path(out).write_text(json.dumps(result))
    spark.stop()


def checkpoint_files(table: str) -> list[str]:
    """The log checkpoints of the table at ``table`` (s3a://), listed by the S3 API itself."""
    bucket, key = table.removeprefix("s3a://").split("/", 1)
    client = S3Server(os.environ["S3_ENDPOINT"], bucket).client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{key}/_delta_log/")
    names = [o["Key"].rsplit("/", 1)[1] for page in pages for o in page.get("Contents", [])]
    return sorted(n for n in names if n.endswith(CHECKPOINT_SUFFIX))


def maintain_scenario(spark: Any, root: str) -> dict[str, Any]:
    """The child's maintenance part: tables under ``root`` as the job and the audit write them, the
    CLI's ``maintain`` over them, and what delta-rs, Spark and the S3 API read back."""
    from app.config import load_config
    from app.contracts.tables import FINDINGS_SCHEMA, INCIDENTS_SCHEMA
    from app.storage import backend, delta_rows, maintenance
    from app.storage.handles import open_handle
    from app.storage.tables import tables_from_config
    from app.stream.ledger import LedgerWriter

    overrides = [f"paths.data_dir={root}", *storage_overrides(), *MAINTAIN_OVERRIDES]
    cfg = load_config("local", overrides=overrides)
    storage = cfg.storage  # what the CLI's maintain reads with: no session runs there
    tables = tables_from_config(cfg)

    # The job's micro-batches, one commit and one file each, on every day and on today.
    writer = LedgerWriter(spark, tables.ledger, JOB, "run-1", scope="history")
    writer.ensure()
    for n, day in enumerate([EXPIRED_DAY, *CLOSED_DAYS, TODAY]):
        for b in range(BATCHES_PER_DAY):
            batch_id = n * BATCHES_PER_DAY + b
            writer.write(day_events(day, batch_id + 1), batch_id)
    # The audit's findings: one MERGE per night's finding, and an incident still open.
    delta_rows.merge_rows(storage, tables.findings, FINDINGS_SCHEMA, [
        finding_row("f-cited", "rec-1", EVIDENCE), finding_row("f-uncited", "rec-0", EVIDENCE),
    ], "finding_id")  # fmt: skip
    for n in range(SMALL_MERGES):
        row = finding_row(f"f-{n}", "rec-2", NOW - timedelta(days=1))
        delta_rows.merge_rows(storage, tables.findings, FINDINGS_SCHEMA, [row], "finding_id")
    delta_rows.merge_rows(storage, tables.incidents, INCIDENTS_SCHEMA, [
        incident_row("i-open", "open", EVIDENCE, EVIDENCE, ["f-cited"]),
        incident_row("i-resolved", "resolved", EVIDENCE, EVIDENCE, ["f-uncited"]),
    ], "incident_id")  # fmt: skip

    def day_files(path: str, day: date) -> list[str]:
        table = backend.open_table(backend.location(storage, path))
        assert table is not None
        actions = table.get_add_actions(flatten=True)
        days = [d.isoformat() for d in actions.column("partition.event_date").to_pylist()]
        paths = actions.column("path").to_pylist()
        return sorted(str(p) for p, d in zip(paths, days, strict=True) if d == day.isoformat())

    def spark_rows(path: str, columns: list[str], version: int | None = None) -> list[dict[str, Any]]:
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return plain([r.asDict() for r in reader.load(path).select(*columns).collect()])

    def delta_rs_rows(path: str, columns: list[str]) -> list[dict[str, Any]]:
        return plain(delta_rows.read_columns(storage, path, columns) or [])

    # Spark reads only after maintain (each read of a table on s3a is seconds of the test's time).
    read = {tables.ledger: LEDGER_COLUMNS, tables.findings: FINDING_COLUMNS}
    versions = {path: open_handle("ledger", path, storage).version() for path in read}  # its log's version
    before = {path: delta_rs_rows(path, columns) for path, columns in read.items()}
    out: dict[str, Any] = {
        "ledger_files_before": maintenance.files_by_partition(storage, tables.ledger),
        "findings_files_before": maintenance.files_by_partition(storage, tables.findings),
        "today_files_before": day_files(tables.ledger, TODAY),
        "checkpoints_before": {
            name: checkpoint_files(getattr(tables, name)) for name in ("ledger", "findings")
        },
        "ledger_before": before[tables.ledger],
        "findings_before": before[tables.findings],
    }

    # maintain as a scheduler runs it: the CLI, its storage settings from config with ${ENV} secrets.
    argv = [sys.executable, "-m", "app.cli", "maintain", "--now", NOW.isoformat(), "--json"]
    argv += [a for o in overrides for a in ("--set", o)]
    cli = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=MAINTAIN_TIMEOUT_S,
        check=False,
        preexec_fn=parent_death_preexec(),
    )
    out["cli"] = {"returncode": cli.returncode, "stdout": cli.stdout, "stderr": cli.stderr}

    out.update(
        ledger_files_after=maintenance.files_by_partition(storage, tables.ledger),
        findings_files_after=maintenance.files_by_partition(storage, tables.findings),
        today_files_after=day_files(tables.ledger, TODAY),
        append_only_after=maintenance.is_append_only(storage, tables.ledger),
        checkpoints_after={name: checkpoint_files(getattr(tables, name)) for name in ("ledger", "findings")},
        ledger_spark=spark_rows(tables.ledger, LEDGER_COLUMNS),
        ledger_delta_rs=delta_rs_rows(tables.ledger, LEDGER_COLUMNS),
        ledger_travel=spark_rows(tables.ledger, LEDGER_COLUMNS, versions[tables.ledger]),
        findings_spark=spark_rows(tables.findings, FINDING_COLUMNS),
        findings_delta_rs=delta_rs_rows(tables.findings, FINDING_COLUMNS),
        findings_travel=spark_rows(tables.findings, FINDING_COLUMNS, versions[tables.findings]),
        incidents_delta_rs=delta_rs_rows(tables.incidents, ["incident_id"]),
    )
    return out


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


@pytest.fixture(scope="module")
def s3_scenario(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """The child's results and output, for every test of this module (one JVM start)."""
    return run_scenario(s3_server, tmp_path_factory.mktemp("s3-scenario"))


@pytest.mark.timeout(1200)
def test_delta_rs_writes_on_s3a_are_read_back_by_spark_as_the_same_rows_and_no_secret_is_shown(
    s3_scenario: tuple[dict[str, Any], str],
) -> None:
    result, output = s3_scenario

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


@pytest.mark.timeout(1200)
def test_maintain_on_s3a_compacts_deletes_checkpoints_and_vacuums_as_on_local_disk(
    s3_scenario: tuple[dict[str, Any], str],
) -> None:
    m = s3_scenario[0]["maintain"]
    cli = m["cli"]
    assert cli["returncode"] == 0, cli["stderr"][-4000:]
    summary = {t["table"]: t for t in json.loads(cli["stdout"])["tables"]}
    closed, expired, today = [d.isoformat() for d in CLOSED_DAYS], EXPIRED_DAY.isoformat(), TODAY.isoformat()

    # The ledger: its closed days in one file each, the expired day gone, today's micro-batches as
    # the job wrote them, append-only again after the deletion, a log checkpoint where none was.
    assert m["ledger_files_before"] == {d: BATCHES_PER_DAY for d in [expired, *closed, today]}
    assert sorted(summary["ledger"]["compacted"]) == closed
    assert summary["ledger"]["rows_deleted"] == BATCHES_PER_DAY * 8  # 4 events x 2 partitions a batch
    assert m["ledger_files_after"] == {**{d: 1 for d in closed}, today: BATCHES_PER_DAY}
    assert m["today_files_after"] == m["today_files_before"]
    assert len(m["today_files_before"]) == BATCHES_PER_DAY
    assert m["append_only_after"] is True
    assert m["checkpoints_before"] == {"ledger": [], "findings": []}
    assert m["checkpoints_after"]["ledger"]
    assert m["checkpoints_after"]["findings"]

    # Every row of the kept days is there, the same through delta-rs and Spark's s3a; Spark reads
    # the version before maintain as delta-rs read it then: VACUUM listed the table's files on S3
    # and kept every one the last 7 days reference (all, here: the compaction removed them just now).
    assert (summary["ledger"]["files_vacuumed"], summary["findings"]["files_vacuumed"]) == (0, 0)
    kept = [r for r in m["ledger_before"] if r["event_date"] != expired]
    assert len(kept) == len(m["ledger_before"]) - BATCHES_PER_DAY * 8
    assert m["ledger_spark"] == kept
    assert m["ledger_delta_rs"] == m["ledger_spark"]
    assert m["ledger_travel"] == m["ledger_before"]

    # The findings: many small MERGE commits in one file; retention took the old uncited finding and
    # the resolved incident, and kept what the open incident cites.
    assert m["findings_files_before"][""] > SMALL_MERGES
    assert summary["findings"]["compacted"] == [""]
    assert (summary["findings"]["rows_deleted"], summary["incidents"]["rows_deleted"]) == (1, 1)
    assert m["findings_files_after"] == {"": 1}
    ids = [r["finding_id"] for r in m["findings_spark"]]
    assert sorted(ids) == sorted(["f-cited", *(f"f-{n}" for n in range(SMALL_MERGES))])
    assert m["findings_delta_rs"] == m["findings_spark"]
    assert m["findings_travel"] == m["findings_before"]
    assert m["incidents_delta_rs"] == [{"incident_id": "i-open"}]

    for secret in (S3_SECRET_KEY, S3_ACCESS_KEY):
        assert secret not in cli["stdout"]
        assert secret not in cli["stderr"]
