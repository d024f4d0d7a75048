"""Benchmark: time of `reconcile` / time of a bare scan-and-count of the sink's coordinate columns.

    .venv/bin/python -m bench.reconcile --rows 10000000
    .venv/bin/python -m bench.reconcile --rows 100000000 --partitions 128
    .venv/bin/python -m bench.reconcile --rows 1000000000 --partitions 128   # ~10 GB, ~11 min to generate
    .venv/bin/python -m bench.reconcile --rows 10000000 --s3a --repeat 3    # tables on s3a:// (moto)
    .venv/bin/python -m bench.reconcile --rows 10000000 --cluster --repeat 3          # standalone cluster
    .venv/bin/python -m bench.reconcile --rows 10000000 --cluster --s3a --repeat 3    # both

Synthetic Delta tables are generated with spark.range, clustered by (partition, offset) so every
file has tight min/max statistics, like a sink written by micro-batches: a ledger with one
checkpoint per partition every --per-checkpoint offsets, one group commit per checkpoint, a few
missing offsets and a few duplicated ones. The baseline is
``groupBy(topic, partition).agg(count(offset), min(offset), max(offset))`` over the same table,
i.e. one read of the three coordinate columns; the ratio is measured in the same process and
session, baseline first (after a warm-up) and reconcile second. ``ratio`` is that first,
cold reconcile (new output tables, JVM code paths not yet warm: what a nightly spark-submit pays).
``rerun_ratio`` is the same reconciliation run again in the same session over the same window
(the steady state of a long-lived session); ``rerun_same_findings`` says the re-run found the same
findings and added no rows to the findings table. Generated tables are reused when they exist
(--regenerate to rebuild). --repeat N runs that pair N times over fresh output tables and gives
the median, min and max of both ratios.

With --s3a every table lives on s3a:// of an S3 API server the bench starts on loopback (moto's
server mode, in its own process, stopped with the bench), reached by Spark through Hadoop's s3a
connector and by delta-rs for the driver-side tables, with the same storage options a deployment
puts in config. moto keeps objects in memory, so the tables are generated on every run.

With --cluster the session runs against a Spark standalone cluster the bench starts on loopback
(a master and two workers with one core each, from pyspark's distribution, in process groups of
their own that die with the bench; tests/cluster/servers.py, which the cluster test tier starts
the same way): this process is the driver (client mode), as a nightly spark-submit's driver is,
and each worker runs one executor of 2 GB, which gets the jars from the driver. Local tables are
then a file:// URI on the disk both workers share, the same tables a run without --cluster made.
The report adds which executors ran the sink scans, from the application's event log.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.config import AppConfig, PathsConfig, ReconcileConfig, StorageConfig, load_config
from app.contracts.tables import GROUP_COMMITS_SCHEMA, LEDGER_SCHEMA
from app.reconcile.outputs import AuditRun
from app.reconcile.run import ReconcileResult, run_reconcile
from app.runtime import jvm
from app.runtime.spark import build_spark_session
from app.storage import files
from app.storage.handles import AuditTables
from tests.cluster import servers, submit

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TOPIC, GROUP, JOB, RUN = "orders", "bench-group", "bench-job", "bench-run"
# The reconcile's output tables (keys of TablesConfig).
OUTPUT_TABLES = ("findings", "partition_summary", "restarts", "incidents", "audit_runs")
S3_BUCKET = "offset-audit-bench"
# --cluster: a master and WORKERS workers, one core each, and one executor of EXECUTOR_MEMORY on
# each (the machine has memory to spare but two cores).
WORKERS = 2
EXECUTOR_MEMORY = "2g"


def s3a_options(endpoint: str) -> dict[str, str]:
    """What a deployment puts in config `storage.options` for an S3 server on plain HTTP."""
    return {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": servers.S3_REGION,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.access.key": servers.S3_ACCESS_KEY,
        "fs.s3a.secret.key": servers.S3_SECRET_KEY,
    }


def cluster_conf(event_log_dir: Path) -> dict[str, str]:
    """The session's settings against the standalone cluster: one 1-core executor per worker with
    EXECUTOR_MEMORY, and an event log to tell afterwards which executors ran the sink scans."""
    return {
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.executor.cores": "1",
        "spark.cores.max": str(WORKERS),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log_dir.resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def sink_scan_placement(event_log_dir: Path, sink_suffix: str) -> dict[str, Any]:
    """Executors the application got and the tasks of its sink scans by executor, from the event log
    (written out when the session stops): the scans ran on the workers, not in the driver."""
    executors = submit.executors_added(event_log_dir)
    tasks = submit.tasks_scanning(event_log_dir, sink_suffix)
    by_executor: dict[str, int] = {}
    for task in tasks:
        by_executor[task.executor_id] = by_executor.get(task.executor_id, 0) + 1
    return {
        "executors": dict(sorted(executors.items())),
        "sink_scan_tasks_by_executor": dict(sorted(by_executor.items())),
        "sink_scan_tasks_on_driver": by_executor.get("driver", 0),
    }


def generate(spark: SparkSession, root: str, rows: int, partitions: int, per_checkpoint: int) -> None:
    per_partition = rows // partitions
    files = max(partitions, rows // 2_000_000)
    ids = spark.range(0, per_partition * partitions, 1, files)
    p = (F.col("id") / per_partition).cast("int")
    o = F.col("id") % per_partition
    sink = ids.select(
        F.lit(TOPIC).alias("kafka_topic"),
        p.alias("kafka_partition"),
        o.alias("kafka_offset"),
        (F.lit(T0.timestamp()) + o / 1000).cast("timestamp").alias("kafka_timestamp"),
        (o / per_checkpoint).cast("long").alias("_checkpoint_id"),
        F.lit(RUN).alias("_run_id"),
    )
    # A few anomalies for the reconciliation to find: 10 missing offsets in partition 1 and
    # 100 offsets of partition 2 written twice.
    sink = sink.filter(~((F.col("kafka_partition") == 1) & F.col("kafka_offset").between(1000, 1009)))
    dup = sink.filter((F.col("kafka_partition") == 2) & F.col("kafka_offset").between(2000, 2099))
    sink.write.format("delta").mode("overwrite").save(f"{root}/tables/sink")
    dup.withColumn("_run_id", F.lit("bench-run-2")).write.format("delta").mode("append").save(
        f"{root}/tables/sink"
    )

    checkpoints = -(-per_partition // per_checkpoint)  # the last one covers the partition's tail
    ck = spark.range(1, checkpoints + 1).withColumnRenamed("id", "checkpoint_id")
    parts = spark.range(partitions).select(F.col("id").cast("int").alias("partition"))
    grid = ck.crossJoin(parts).withColumn(
        "offset", F.least(F.col("checkpoint_id") * per_checkpoint, F.lit(per_partition))
    )
    t = F.lit(T0.timestamp()) + F.col("checkpoint_id") * 10

    def events(event_type: str, delay: int, detail: str) -> DataFrame:
        when = (t + delay).cast("timestamp")
        return grid.select(
            F.lit(JOB).alias("job_name"),
            F.lit(RUN).alias("run_id"),
            F.lit("spark").alias("engine"),
            "checkpoint_id",
            F.lit(event_type).alias("event_type"),
            when.alias("event_time"),
            F.lit(GROUP).alias("group_id"),
            F.lit(TOPIC).alias("topic"),
            "partition",
            "offset",
            F.col("offset").alias("raw_offset"),
            F.lit("next").alias("offset_semantics"),
            F.lit(detail).alias("detail"),
            F.to_date(when).alias("event_date"),
        )

    ledger = (
        events("CHECKPOINT_SNAPSHOT", 0, "{}")
        .unionByName(events("CHECKPOINT_COMPLETED", 1, "{}"))
        .unionByName(events("COMMIT_REQUESTED", 1, '{"attempt":1}'))
        .unionByName(events("COMMIT_SUCCEEDED", 2, '{"attempt":1}'))
    )
    spark.createDataFrame(ledger.rdd, LEDGER_SCHEMA).write.format("delta").partitionBy("event_date").mode(
        "overwrite"
    ).save(f"{root}/tables/ledger")
    commit_time = (t + 2).cast("timestamp")
    commits = grid.select(
        F.lit(GROUP).alias("group_id"),
        F.lit(TOPIC).alias("topic"),
        "partition",
        F.col("offset").alias("committed_offset"),
        F.lit(None).cast("int").alias("leader_epoch"),
        F.lit("").alias("metadata"),
        commit_time.alias("commit_time"),
        F.lit(None).cast("timestamp").alias("expire_time"),
        F.lit("commit").alias("record_kind"),
        F.lit(3).alias("value_version"),
        F.lit(False).alias("transactional"),
        F.lit(0).alias("log_partition"),
        (F.col("checkpoint_id") * partitions + F.col("partition")).alias("log_offset"),
        commit_time.alias("log_time"),
        F.lit("bench").alias("ingest_run_id"),
    )
    spark.createDataFrame(commits.rdd, GROUP_COMMITS_SCHEMA).write.format("delta").mode("overwrite").save(
        f"{root}/tables/group_commits"
    )


def baseline(spark: SparkSession, path: str) -> float:
    start = time.monotonic()
    spark.read.format("delta").load(path).groupBy("kafka_topic", "kafka_partition").agg(
        F.count("kafka_offset"), F.min("kafka_offset"), F.max("kafka_offset")
    ).collect()
    return time.monotonic() - start


def with_outputs_of_pair(cfg: AppConfig, pair: int) -> AppConfig:
    """Output tables of the pair's own: a table deleted and created again under the same path
    would make Spark's cached Delta log of it warn and reload, inside the measured time."""

    def own(name: str) -> str:
        return f"{name}-{pair}"  # a bare name: under <data_dir>/tables

    # Named one by one: a **dict of settings would hide a misspelt one from the type checker.
    tables = dataclasses.replace(
        cfg.tables,
        findings=own("findings"),
        partition_summary=own("partition_summary"),
        restarts=own("restarts"),
        incidents=own("incidents"),
        audit_runs=own("audit_runs"),
    )
    return dataclasses.replace(cfg, tables=tables)


def reconcile_twice(spark: SparkSession, cfg: AppConfig) -> dict[str, Any]:
    """One reconcile into fresh output tables and its re-run, each against the bare scan."""
    tables = AuditTables.from_config(cfg, None).locations
    for name in OUTPUT_TABLES:
        files.delete_path(spark, tables.named(name))  # left by an earlier bench run
    sink = tables.sink
    base = baseline(spark, sink)
    now = datetime.now(UTC)
    started = time.monotonic()
    result = run_reconcile(
        spark, cfg, AuditRun(run_id="bench", now=now, since=None, until=now), confirmer=None
    )
    took = time.monotonic() - started
    # The same reconciliation again in the same session, over the same window (the run record is
    # dropped so the window is not resumed from it) and into the tables the first run created:
    # the steady state of a long-lived session, with JVM warm-up and table creation paid already.
    # It also shows the re-run is idempotent: the findings table keeps the same rows.
    findings_table = tables.findings
    findings_before = spark.read.format("delta").load(findings_table).count()
    files.delete_path(spark, tables.audit_runs)
    started = time.monotonic()
    again: ReconcileResult = run_reconcile(
        spark, cfg, AuditRun(run_id="bench-again", now=now, since=None, until=now), confirmer=None
    )
    took_again = time.monotonic() - started
    findings_after = spark.read.format("delta").load(findings_table).count()
    base_after = baseline(spark, sink)
    return {
        "baseline_s": round(base, 2),
        "baseline_after_s": round(base_after, 2),
        "reconcile_s": round(took, 2),
        "reconcile_sink_phase_s": round(result.sink_seconds, 2),
        # Everything but the sink: ledger and commit analysis, MERGE and appends. Nearly fixed, so
        # it dominates the ratio at small sizes.
        "reconcile_other_s": round(took - result.sink_seconds, 2),
        "ratio": round(took / min(base, base_after), 2),
        "rerun_s": round(took_again, 2),
        "rerun_sink_phase_s": round(again.sink_seconds, 2),
        "rerun_ratio": round(took_again / min(base, base_after), 2),
        "rerun_same_findings": again.counts == result.counts and findings_after == findings_before,
        "findings": {f"{t}/{s}": n for (t, s), n in sorted(result.counts.items())},
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument(
        "--per-checkpoint", type=int, default=5_000, help="offsets per checkpoint and partition"
    )
    parser.add_argument("--dir", type=Path, default=Path("data/bench"))
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="reconcile/re-run pairs to measure")
    parser.add_argument(
        "--s3a", action="store_true", help="tables on s3a:// of an S3 server (moto) started on loopback"
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="run the session against a Spark standalone cluster (a master and two 1-core workers) "
        "started on loopback, this process as the driver",
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    # Server logs and worker dirs of this run, kept for a look afterwards.
    home = Path(tempfile.mkdtemp(prefix="servers-", dir=args.dir)).resolve()
    with contextlib.ExitStack() as stack:
        s3 = stack.enter_context(servers.s3_server(home, S3_BUCKET)) if args.s3a else None
        cluster = (
            stack.enter_context(servers.spark_cluster(home, WORKERS, worker_memory=EXECUTOR_MEMORY))
            if args.cluster
            else None
        )
        run(args, s3.endpoint if s3 else None, cluster, home)
    # Each executor fetched its own copy of the jars (the AWS SDK bundle alone is 600 MB); the
    # executors' logs beside them stay.
    for jar in home.glob("worker-*/app-*/*/*.jar"):
        jar.unlink()


def run(
    args: argparse.Namespace, endpoint: str | None, cluster: servers.SparkCluster | None, home: Path
) -> None:
    name = f"rows-{args.rows}-p{args.partitions}-c{args.per_checkpoint}"
    if endpoint:
        root = f"s3a://{S3_BUCKET}/{name}"
    elif cluster:  # the executors are other processes: a URI on the disk every worker shares
        root = (args.dir / name).resolve().as_uri()
    else:
        root = str(args.dir / name)
    cfg = load_config("local")
    spark_cfg = cfg.spark
    event_log_dir = home / "events"
    if cluster:
        event_log_dir.mkdir()
        spark_cfg = dataclasses.replace(
            spark_cfg,
            master=cluster.master_url,
            mode="local",  # this process builds the session (client mode), as locally
            conf={**spark_cfg.conf, **cluster_conf(event_log_dir)},
        )
    cfg = dataclasses.replace(
        cfg,
        paths=PathsConfig(data_dir=root, cache_dir=cfg.paths.cache_dir),
        reconcile=ReconcileConfig(confirm_gaps=False),
        storage=StorageConfig(options=s3a_options(endpoint) if endpoint else {}),
        spark=spark_cfg,
    )
    jars = jvm.spark_extra_jars(cfg.paths.cache_dir)
    if endpoint:  # the s3a connector and the AWS SDK, as on a cluster
        jars += jvm.resolve_classpath("s3", cfg.paths.cache_dir)
    # spark.jars: the driver serves them to the executors as well.
    spark = build_spark_session(
        cfg.spark, jars, str(args.dir / "warehouse"), storage_options=cfg.storage.options
    )
    tables = AuditTables.from_config(cfg, None).locations
    sink = tables.sink
    if args.regenerate:
        files.delete_path(spark, root)
    if not files.table_exists(spark, sink):
        started = time.monotonic()
        generate(spark, root, args.rows, args.partitions, args.per_checkpoint)
        print(f"generated in {time.monotonic() - started:.1f}s under {root}")

    baseline(spark, sink)  # warm-up: JIT, Delta log, file listing cache
    runs = [reconcile_twice(spark, with_outputs_of_pair(cfg, i)) for i in range(args.repeat)]
    report = {
        "storage": "s3a (moto)" if endpoint else "local",
        "spark": f"standalone, {WORKERS} workers x 1 core, executors {EXECUTOR_MEMORY}"
        if cluster
        else cfg.spark.master,
        "sink_rows": spark.read.format("delta").load(sink).count(),
        "partitions": args.partitions,
        "ledger_rows": spark.read.format("delta").load(tables.ledger).count(),
        # The first pair is the cold one (a nightly spark-submit); later ones run in a warm JVM.
        "ratio": spread([r["ratio"] for r in runs]),
        "rerun_ratio": spread([r["rerun_ratio"] for r in runs]),
        "runs": runs,
    }
    if cluster:
        spark.stop()  # writes the event log out
        report["placement"] = sink_scan_placement(event_log_dir, f"{name}/tables/sink")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
