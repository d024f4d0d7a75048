"""End to end: `offset-audit demo` tells its story in few lines and its real incidents yield exactly the
findings they should, the reference job's and those of a user's own job attached beside it; its
nightly tells monitoring about them, and a clean run of the same pipeline yields none at warn or
above."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.contracts import vocabulary as vocab
from app.demo.story import USER_JOB, USER_TOPIC, WARN_OR_ABOVE, Demo, DemoScale
from app.incidents import repair
from app.incidents.io import mark_resolved, read_incidents
from app.kafka.gaps import kafka_gap_confirmer
from app.nightly.run import Nightly
from app.pipeline.context import AuditContext
from app.reconcile.outputs import AuditRun
from app.reconcile.run import run_reconcile
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from app.stream.job import StreamJob
from tests.kafka.processes import cli
from tests.support.config import build_config
from tests.support.http_server import recording_server
from tests.support.metrics import samples
from tests.support.stderr import RAW_LIBRDKAFKA
from tests.support.streaming import create_topic, job_config, produce, until_all_read

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# What the demo printed among its story before third-party logs were quieted: Great Expectations'
# INFO lines (209 of them), the Kafka connector's warnings during the broker outage, Spark's startup
# notices and streaming warnings.
THIRD_PARTY_NOISE = re.compile(
    r"great_expectations|_docs_decorators|NetworkClient|AdminClient|NativeCodeLoader|log4j|"
    r"resolves to a loopback address|Setting default log level|ProcessingTimeExecutor|"
    r"ResolveWriteToStream|Failed to cancel job group|SparkStringUtils|py4j|urllib3"
)
# The story, its progress and the verdict took 60 lines (408 before); the rest is room for a few
# more warnings on a loaded machine.
MAX_DEMO_LINES = 80
# With alert channels set, the night ends with its alerts step.
NIGHTLY_STEPS = ("ingest-offsets", "reconcile", "forensics", "check", "report", "maintain", "alerts")


@pytest.mark.timeout(1200)
def test_demo_tells_its_story_in_few_lines_and_finds_exactly_the_injected_incidents(
    spark: SparkSession, tmp_path: Path
) -> None:
    scale = DemoScale()  # what `offset-audit demo` runs
    textfile = tmp_path / "offset_audit.prom"
    with recording_server() as (url, received):
        # `offset-audit demo` as a person runs it, every alert channel of its nightly going to a
        # real local HTTP server.
        argv = cli(
            "demo",
            tmp_path,
            f"alerts.textfile={textfile}",
            f"alerts.pushgateway_url={url}",
            f"alerts.webhook_url={url}/hook",
            args=("--no-screenshot",),
        )
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1000, check=False
        )
    output = done.stdout  # stdout and stderr together, as a terminal shows them
    assert done.returncode == 0, output[-5000:]
    lines = output.splitlines()
    assert len(lines) <= MAX_DEMO_LINES, output
    assert not THIRD_PARTY_NOISE.search(output), output
    # librdkafka's log goes through Python logging: none of the demo's clients writes raw lines.
    assert not RAW_LIBRDKAFKA.search(output), output
    assert "every injected incident was found and nothing else at warn or above" in lines
    (injected,) = [line for line in lines if line.startswith("injected incidents: ")]
    assert injected.removeprefix("injected incidents: ").split(", ") == [
        "crash and restart",
        "commit failure during a broker outage",
        "manual offset reset",
        "restart from latest",
        "second writer",
        "user job's sink restored",
    ]
    (nightly_line,) = [line for line in lines if line.startswith("nightly ")]
    nightly_run_id = nightly_line.split()[1]
    steps = [line.split()[:2] for line in lines if re.match(r"^  (ok|--|!!) ", line)]
    assert steps == [["ok", step] for step in NIGHTLY_STEPS]
    # The completeness table puts each injected loss in the windows its records were produced in
    # (the demo checks the windows against the wall-clock span of the injection; WRONG otherwise).
    assert not [line for line in lines if line.startswith("  WRONG ")], output
    heading = lines.index("completeness per window (the dashboard's heatmap): where the records were lost")
    lossy = [line for line in lines[heading + 1 :] if re.match(r"^  (orders-audit|payments) partition", line)]
    assert len(lossy) == 3 + 2, output  # the reference job's three partitions, the user job's two
    for line in lossy[:3]:
        assert sum(int(n) for n in re.findall(r"(\d+) in \d\d:\d\d", line)) == scale.downtime_per_partition

    # The findings behind the verdict, read back from the demo's tables.
    demo = Demo(build_config(data_dir=tmp_path), spark, scale)
    # Offsets produced while the job was down: after the first records and three rounds of the
    # outage and reset steps.
    skip_lo = scale.initial_per_partition + 3 * scale.outage_per_partition
    skip_hi = skip_lo + scale.downtime_per_partition
    demo.skipped = (skip_lo, skip_hi)
    demo.duplicated = (scale.per_trigger, scale.per_trigger + scale.duplicated_rows)
    demo.compare()
    outcome = demo.outcome
    assert outcome.missing == []
    assert outcome.unexpected == []
    # Exactly one finding for each expected one: nothing doubled, nothing extra.
    assert len(outcome.found) == len(outcome.expected)
    by_type = sorted((e.finding_type, e.partition, e.offset_start, e.offset_end) for e in outcome.expected)
    assert ("GAP", 0, skip_lo, skip_hi) in by_type
    assert ("RESTART_SKIP", 2, skip_lo, skip_hi) in by_type
    assert ("DUPLICATE", 1, *demo.duplicated) in by_type
    # The user's job: its last batch, restored away from its sink, named on each partition with the
    # offsets its checkpoint gives that batch.
    lost = demo.user_lost_batch()
    assert sorted(lost) == [0, 1]
    assert all(end > start for start, end in lost.values())
    for p, (start, end) in lost.items():
        assert (vocab.BATCH_NOT_IN_SINK, p, start, end) in by_type

    # One incident per injected event, with its impact in records.
    incidents = {i.kind: i for i in read_incidents(AuditTables.from_config(demo.cfg, spark).incidents)}
    assert {k: i.severity for k, i in incidents.items()} == {
        "unclean_stop": "info",
        "commit_outage": "warn",
        "external_offset_change": "error",
        "restart": "critical",
        "second_writer": "error",
        "lost_batch": "critical",
    }
    # The user's job's incident, named with its Delta version, its offsets lost and how to replay.
    user = incidents["lost_batch"]
    assert user.job_name == USER_JOB
    assert user.impact.records_lost == sum(end - start for start, end in lost.values())
    assert "Delta version" in user.cause
    (told,) = [line for line in lines if user.incident_id in line]  # the demo's own output names it
    assert told.split()[:2] == ["critical", "lost_batch"], told
    assert incidents["restart"].impact.records_lost == 3 * (skip_hi - skip_lo)
    assert incidents["restart"].partitions == 3
    assert incidents["second_writer"].impact.records_duplicated == scale.duplicated_rows

    # The nightly's metrics, parsed back with prometheus_client's parser, count those incidents
    # and their impact; the Pushgateway got the same metrics as the textfile.
    pushed = [r.body.decode() for r in received if (r.method, r.path) == ("PUT", "/metrics/job/offset-audit")]
    assert len(pushed) == 1
    metrics = samples(textfile.read_text())
    assert samples(pushed[0]) == metrics
    open_incidents = {
        (dict(labels)["kind"], dict(labels)["severity"]): value
        for (name, labels), value in metrics.items()
        if name == "offset_audit_incidents" and value
    }
    assert open_incidents == {(k, i.severity): 1 for k, i in incidents.items()}
    job = (("job", demo.cfg.stream.job_name),)
    assert metrics[("offset_audit_records", (("impact", "lost"), *job))] == 3 * (skip_hi - skip_lo)
    assert metrics[("offset_audit_records", (("impact", "duplicated"), *job))] == scale.duplicated_rows
    lags = {
        dict(labels)["partition"]: value
        for (name, labels), value in metrics.items()
        if name == "offset_audit_commit_lag_offsets" and dict(labels)["group"] == demo.cfg.stream.group_id
    }
    assert lags == {"0": 0, "1": 0, "2": 0}  # the last run committed its last checkpoint
    # The user's job committed its batches to its group (attach with group_id), its last one too.
    user_lags = {
        dict(labels)["partition"]: value
        for (name, labels), value in metrics.items()
        if name == "offset_audit_commit_lag_offsets" and dict(labels)["topic"] == USER_TOPIC
    }
    assert user_lags == {"0": 0, "1": 0}
    assert metrics[("offset_audit_nightly_success", ())] == 1
    assert ("offset_audit_last_success_timestamp_seconds", ()) in metrics
    # The webhook got the nightly's JSON summary: each incident with its id, ranges, impact and
    # the repair command, everything a scheduler needs to page someone.
    (hook,) = [json.loads(r.body) for r in received if (r.method, r.path) == ("POST", "/hook")]
    assert hook["run_id"] == nightly_run_id
    (reconciled,) = [s["summary"] for s in hook["steps"] if s["step"] == "reconcile"]
    sent = {i["kind"]: i for i in reconciled["incidents"]}
    assert {k: i["incident_id"] for k, i in sent.items()} == {k: i.incident_id for k, i in incidents.items()}
    restart = sent["restart"]
    assert restart["impact"]["records_lost"] == 3 * (skip_hi - skip_lo)
    assert sorted((r["partition"], r["start"], r["end"]) for r in restart["ranges"]) == [
        (p, skip_lo, skip_hi) for p in range(3)
    ]
    assert restart["repair"] == f"offset-audit repair --incident {restart['incident_id']}"
    assert sent["second_writer"]["impact"]["records_duplicated"] == scale.duplicated_rows

    # Repairing the restart's gap and the second writer's copies: a reconcile of the whole history
    # then finds neither, and both incidents are resolved.
    bootstrap = demo.broker.start().bootstrap_servers
    try:
        tables = AuditTables.from_config(demo.cfg, spark)
        for kind in ("restart", "second_writer"):
            repaired = repair.execute(spark, demo.cfg, incidents[kind], tables.sink, lambda: bootstrap)
            mark_resolved(tables.incidents, incidents[kind], repaired)
        confirm = kafka_gap_confirmer(demo.cfg.kafka, bootstrap, max_records=100, timeout_s=60)
        whole_history = datetime(2000, 1, 1, tzinfo=UTC)
        now = datetime.now(UTC)
        after = run_reconcile(
            spark,
            demo.cfg,
            AuditRun(run_id="after-repair", now=now, since=whole_history, until=now),
            confirmer=confirm,
        )
    finally:
        demo.broker.stop()
    assert {t for t, _ in after.counts} & {"GAP", "DUPLICATE"} == set()
    statuses = {i.kind: i.status for i in read_incidents(AuditTables.from_config(demo.cfg, spark).incidents)}
    assert (statuses["restart"], statuses["second_writer"]) == ("resolved", "resolved")


def test_clean_run_reports_nothing_at_warn_or_above(
    spark: SparkSession, bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic, group, job = f"clean-{unique}", f"clean-{unique}", f"clean-{unique}"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 400, 2)
    cfg = job_config(
        tmp_path,
        bootstrap,
        topic,
        group,
        job,
        "stream.max_offsets_per_trigger=150",
        f"ingest.groups=[{group}]",
        f"reconcile.jobs=[{job}]",
    )
    StreamJob(spark, cfg, bootstrap, run_id="clean-1").run(until_all_read(bootstrap, topic, 2))
    produce(bootstrap, topic, 100, 2, start=400)
    StreamJob(spark, cfg, bootstrap, run_id="clean-2").run(until_all_read(bootstrap, topic, 2))

    result = Nightly(AuditContext.for_session(cfg, spark, lambda: bootstrap)).run()

    assert result.failed_step is None
    findings = spark.read.format("delta").load(tables_from_config(cfg).findings)
    loud = findings.where(F.col("severity").isin(*WARN_OR_ABOVE)).collect()
    assert loud == []
    assert result.failed_expectations == {}
