"""Whole reconcile runs over Delta fixture tables (configured by `tests.support.config`): the fixture
tables written as the app writes them, the tables read back, a run over a fixed window."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from app.config import AppConfig
from app.reconcile.outputs import AuditRun
from app.reconcile.run import ReconcileResult, run_reconcile
from app.storage.tables import tables_from_config
from tests.support.ledger_data import CONTRACTS, commits_table, ledger_table, sink_table, write_table
from tests.support.spark_tables import at, checkpoint, ev, gc, sink_rows


def save(rows: pa.Table, cfg: AppConfig, name: str) -> None:
    """A fixture table, written with delta-rs in its contract's layout (`ledger_data.write_table`):
    reconcile reads it as it reads the tables the app writes, without a Spark job to write it."""
    write_table(tables_from_config(cfg).named(name), CONTRACTS[name], rows)


def read(spark: SparkSession, cfg: AppConfig, name: str) -> DataFrame:
    return spark.read.format("delta").load(tables_from_config(cfg).named(name))


def reconcile(
    spark: SparkSession,
    cfg: AppConfig,
    run_id: str,
    confirmer: Any = None,
    since: Any = None,
    until: Any = None,
) -> ReconcileResult:
    return run_reconcile(
        spark,
        cfg,
        AuditRun(run_id=run_id, now=at(20_000), since=since, until=until or at(10_000)),
        confirmer=confirmer,
    )


def a_job_with_a_gap(cfg: AppConfig, *, sink: bool = True) -> None:
    save(
        ledger_table(
            ev("RUN_STARTED", 0),
            ev("OFFSETS_RESTORED", 0, offsets={0: 0}, detail={"source": "earliest"}),
            checkpoint(1, 10, {0: 50}),
            ev("RUN_STOPPED", 30),
        ),
        cfg,
        "ledger",
    )
    save(commits_table(gc(12, 0, 50)), cfg, "group_commits")
    if sink:
        save(sink_table(sink_rows(0, range(45))), cfg, "sink")
