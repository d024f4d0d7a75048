"""A small set of audit tables as a reconciliation leaves them, written with delta-rs (no JVM): for
the tests that run the CLI as a person or a scheduler does, over tables they did not build by hand.

The story: run-1 of job-a reads orders/0 and orders/1 to offset 100 and stops cleanly; run-2 starts
from 'latest' (130 on partition 0, so 100..129 are skipped there) and completes a checkpoint at
150. The sink lacks orders/0 [100, 130). The ledger findings are the driver-side audit's own
and RESTART_SKIP); the sink's GAP, which only a Spark scan finds, is stated as that scan states it.
Incidents and restarts are derived from them by the project's functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts import vocabulary as vocab
from app.contracts.tables import (
    AUDIT_RUNS_SCHEMA,
    FINDINGS_SCHEMA,
    INCIDENTS_SCHEMA,
    RESTARTS_SCHEMA,
    SINK_SCHEMA,
)
from app.incidents import grouping as inc
from app.reconcile import findings as rc
from app.reconcile.forensics import restarts as fx
from app.reconcile.ledger import audit as la
from app.storage import delta_rows
from app.storage.tables import tables_from_config
from tests.support.config import build_config
from tests.support.ledger_data import (
    GROUP,
    JOB,
    TOPIC,
    at,
    checkpoint,
    commits_table,
    ev,
    gc,
    ledger_table,
    sink_rows,
)

RECONCILE_RUN = "rec-1"


@dataclass(frozen=True)
class AuditTables:
    data_dir: Path
    job: str
    restart_incident: str  # the open critical incident of run-2's restart from 'latest'
    moment: datetime  # inside the ledger's history, for `forensics --at`


def write_audit_tables(data_dir: Path) -> AuditTables:
    tables = tables_from_config(build_config(data_dir=data_dir))
    ledger = ledger_table(
        ev("RUN_STARTED", 0),
        ev("OFFSETS_RESTORED", 0, offsets={0: 0, 1: 0}, detail={"source": "earliest"}),
        checkpoint(1, 10, {0: 50, 1: 50}),
        checkpoint(2, 20, {0: 100, 1: 100}),
        ev("RUN_STOPPED", 30),
        ev("RUN_STARTED", 100, run="run-2"),
        ev("OFFSETS_RESTORED", 100, run="run-2", offsets={0: 130, 1: 100}, detail={"source": "latest"}),
        checkpoint(3, 110, {0: 150, 1: 150}, run="run-2"),
        ev("RUN_STOPPED", 120, run="run-2"),
    )
    commits = commits_table(*(gc(t, p, o) for t, o in ((12, 50), (22, 100), (112, 150)) for p in (0, 1)))
    audit = la.LedgerAudit(ledger, commits, rc.AuditWindow(until=at(3600)), rc.MatchRules())
    try:
        restarts = audit.restarts()
        ledger_findings = [*audit.all_findings(), *fx.find_restart_anomalies(restarts, {})]
    finally:
        audit.close()
    gap = rc.Finding.of(
        vocab.GAP,
        vocab.CRITICAL,
        vocab.CONFIRMED,
        {"job_name": JOB, "group_id": GROUP, "topic": TOPIC, "partition": 0},
        {"data_records": 30},
        offset_start=100,
        offset_end=130,
        record_count=30,
    )
    findings = rc.finalize_findings([*ledger_findings, gap], RECONCILE_RUN, at(3600))
    incidents = inc.to_incidents(
        inc.group_findings(findings), RECONCILE_RUN, {(JOB, TOPIC, p): 150 for p in (0, 1)}
    )
    restart = next(i for i in incidents if i.kind == vocab.INCIDENT_RESTART)

    write_deltalake(tables.ledger, ledger, partition_by=["event_date"])
    write_deltalake(tables.group_commits, commits)
    sink = [*sink_rows(0, range(100)), *sink_rows(0, range(130, 150), run="run-2", cp=3)]
    sink += sink_rows(1, range(150))
    names = SINK_SCHEMA.fieldNames()
    write_deltalake(
        tables.sink,
        pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in sink], to_arrow_schema(SINK_SCHEMA)),
    )
    delta_rows.append_rows(None, tables.findings, FINDINGS_SCHEMA, [f.to_row() for f in findings])
    delta_rows.append_rows(None, tables.incidents, INCIDENTS_SCHEMA, [i.to_row() for i in incidents])
    delta_rows.append_rows(None, tables.restarts, RESTARTS_SCHEMA, fx.restarts_table(restarts, {}, "fx-1"))
    run = {
        "run_id": RECONCILE_RUN,
        "command": "reconcile",
        "jobs": f'["{JOB}"]',
        "window_start": None,
        "window_end": at(3600),
        "started_at": at(3600),
        "finished_at": at(3601),
        "status": vocab.RUN_SUCCEEDED,
    }
    delta_rows.append_rows(None, tables.audit_runs, AUDIT_RUNS_SCHEMA, [run])
    return AuditTables(data_dir, JOB, restart.incident_id, at(100))
