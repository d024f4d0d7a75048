"""`ingest-offsets` against the real broker, checked against Kafka's own tools.

One scenario builds every kind of group history the audit must understand (classic group, offset-only
committer, new consumer protocol group, committed and aborted transactional commits, offset deletion and
group deletion), ingests it once, and the tests compare the tables with the Admin API (latest committed
offsets) and with Kafka's console consumer + OffsetsMessageFormatter (record by record).
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.cli import main
from app.config import AppConfig
from app.demo.local_kafka import free_port
from app.kafka.clients import plain_conf, retry_kafka
from app.kafka.group_offsets import group_offsets
from app.offsets_topic.decoded import DECODED_SCHEMA, TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS
from app.offsets_topic.decoder import partition_for_group
from app.offsets_topic.plan import IngestResult
from app.offsets_topic.run import ingest_offsets, plan_ingest, write_decoded
from app.offsets_topic.spark_route import decode_on_executors, table_frame
from app.offsets_topic.tables import DECODE_ERRORS, GROUP_COMMITS, GROUP_EVENTS, INGEST_POSITIONS
from app.reconcile.findings import AuditWindow
from app.reconcile.inputs import read_group_commit_rows
from app.runtime import jvm
from app.storage import delta_rows
from app.storage.handles import AuditTables
from app.storage.tables import tables_from_config
from tests.support.config import build_config
from tests.support.streaming import KAFKA_TIMEOUT_S, create_topic, deliver
from tests.unit.kafka_bytes import offset_commit_key, offset_commit_value

pytestmark = pytest.mark.kafka

OFFSETS_TOPIC = "__consumer_offsets"


# --- building group history on the broker --------------------------------------------------------


def consume_and_commit(bootstrap: str, group: str, topic: str, n: int, **extra: Any) -> None:
    """Subscribe (joins the group: classic or new protocol), read n records, commit, leave."""
    conf = {
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "client.id": f"client-{group}", **extra,
    }  # fmt: skip
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 60
    try:
        while seen < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == n, f"{group} read {seen} of {n}"
        # The consumed positions, committed again after a retriable error: harmless.
        retry_kafka(lambda left: consumer.commit(asynchronous=False), f"committing {group}", KAFKA_TIMEOUT_S)
    finally:
        consumer.close()


def commit_offsets(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    """An offset-only committer (Flink's and Spark's style): assign, never join."""
    consumer = Consumer(plain_conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        retry_kafka(
            lambda left: consumer.commit(offsets=offsets, asynchronous=False),
            f"committing {group}",
            KAFKA_TIMEOUT_S,
        )
    finally:
        consumer.close()


def transactional_commits(bootstrap: str, group: str, topic: str, plan: list[tuple[int, bool]]) -> None:
    """send_offsets_to_transaction for each (offset, commit?) in order; False aborts the transaction."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{group}"})
    producer.init_transactions(60)
    metadata_source = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        for offset, commit in plan:
            producer.begin_transaction()
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, offset)], metadata_source.consumer_group_metadata(), 30
            )
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
    finally:
        metadata_source.close()


def kafka_tool(main_class: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    classpath = ":".join(str(j) for j in jvm.resolve_classpath("kafka"))
    cmd = ["java", "-Xmx256m", "-cp", classpath, main_class, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def delete_offsets(bootstrap: str, group: str, topic: str, partition: int) -> None:
    # confluent-kafka 2.16 has no delete_consumer_group_offsets; Kafka's own tool sends OffsetDelete.
    done = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server", bootstrap, "--delete-offsets",
        "--group", group, "--topic", f"{topic}:{partition}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successful" in done.stdout, done.stdout


def admin_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    return {tp: h.offset for tp, h in group_offsets(plain_conf(bootstrap), group, KAFKA_TIMEOUT_S).items()}


def formatter_records(bootstrap: str, partitions: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Every offset record Kafka's OffsetsMessageFormatter prints per partition, read_committed, in order.

    The formatter ignores print.partition/print.offset, so each partition is read alone: the order of its
    output is the log order, which is what the decoded rows are matched against. The console consumer
    ends after --timeout-ms without a record, which also covers its wait for the first one (group-less
    assignment and metadata): 8 s proved too short on a machine at load 25, so it gets 30 s.
    """
    classpath = ":".join(str(j) for j in jvm.resolve_classpath("kafka"))

    def command(partition: int) -> list[str]:
        return [
            "java", "-Xmx256m", "-cp", classpath, "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server", bootstrap, "--topic", OFFSETS_TOPIC, "--partition", str(partition),
            "--offset", "earliest", "--timeout-ms", "30000",
            "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
            "--consumer-property", "exclude.internal.topics=false",
            "--isolation-level", "read_committed",
        ]  # fmt: skip

    procs = {
        p: subprocess.Popen(command(p), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for p in partitions
    }
    out: dict[int, list[dict[str, Any]]] = {}
    decoder = json.JSONDecoder()
    for p, proc in procs.items():
        text, _ = proc.communicate(timeout=120)
        # The formatter writes records back to back without newlines; the tool's exit log follows.
        records, i = [], text.find('{"key"')
        while i != -1:
            obj, end = decoder.raw_decode(text, i)
            records.append(obj)
            i = text.find('{"key"', end)
        out[p] = records
    return out


# --- the scenario --------------------------------------------------------------------------------


@dataclass
class Scenario:
    cfg: AppConfig
    bootstrap: str
    topic: str
    classic: str
    offset_only: str
    new_protocol: str
    tx: str
    doomed: str
    result: IngestResult
    commits: list[dict[str, Any]]  # group_commits after the first run, as plain rows
    events: list[dict[str, Any]]

    @property
    def groups(self) -> list[str]:
        return [self.classic, self.offset_only, self.new_protocol, self.tx, self.doomed]


def ingest_config(data_dir: Path, bootstrap: str, groups: list[str], *extra: str) -> AppConfig:
    return build_config(
        *extra,
        data_dir=data_dir,
        kafka={"bootstrap_servers": bootstrap, "request_timeout_s": 30},
        ingest={"groups": groups},
    )


def table_rows(spark: SparkSession, cfg: AppConfig, name: str) -> list[dict[str, Any]]:
    df = spark.read.format("delta").load(tables_from_config(cfg).named(name))
    if "commit_time" in df.columns:
        df = df.withColumn("commit_ms", F.unix_millis("commit_time"))
    return [r.asDict() for r in df.collect()]


@pytest.fixture(scope="module")
def scenario(spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    u = tmp_path_factory.mktemp("ingest").name[-6:] + str(time.time_ns())[-6:]
    topic = f"audited-{u}"
    create_topic(bootstrap, topic, 2)
    producer = Producer(plain_conf(bootstrap))
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    deliver(producer)

    s = dict(
        classic=f"classic-{u}", offset_only=f"offset-only-{u}", new_protocol=f"kip848-{u}",
        tx=f"tx-{u}", doomed=f"doomed-{u}",
    )  # fmt: skip
    consume_and_commit(bootstrap, s["classic"], topic, 20)
    commit_offsets(bootstrap, s["offset_only"], [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)])
    commit_offsets(bootstrap, s["offset_only"], [TopicPartition(topic, 0, 7)])
    consume_and_commit(bootstrap, s["new_protocol"], topic, 20, **{"group.protocol": "consumer"})
    transactional_commits(bootstrap, s["tx"], topic, [(5, False), (6, True), (8, False)])
    delete_offsets(bootstrap, s["classic"], topic, 1)
    consume_and_commit(bootstrap, s["doomed"], topic, 20)
    admin = AdminClient(plain_conf(bootstrap))
    retry_kafka(
        lambda left: admin.delete_consumer_groups([s["doomed"]], request_timeout=left)[s["doomed"]].result(
            left
        ),
        f"deleting {s['doomed']}",
        KAFKA_TIMEOUT_S,
    )

    cfg = ingest_config(tmp_path_factory.mktemp("ingest-data"), bootstrap, list(s.values()))
    result = ingest_offsets(spark, cfg, bootstrap, cfg.ingest.groups, run_id="run-1")
    return Scenario(
        cfg=cfg, bootstrap=bootstrap, topic=topic, result=result,
        commits=table_rows(spark, cfg, GROUP_COMMITS), events=table_rows(spark, cfg, GROUP_EVENTS), **s,
    )  # fmt: skip


def latest_per_partition(rows: list[dict[str, Any]], group: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The newest record per (topic, partition) of one group: its records share one log partition, so the
    log offset orders them."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted((r for r in rows if r["group_id"] == group), key=lambda r: r["log_offset"]):
        latest[(r["topic"], r["partition"])] = r
    return latest


# --- tests ---------------------------------------------------------------------------------------


def test_latest_commit_per_partition_equals_admin_api(scenario: Scenario) -> None:
    for group in scenario.groups:
        latest = latest_per_partition(scenario.commits, group)
        decoded = {k: r["committed_offset"] for k, r in latest.items() if r["record_kind"] == "commit"}
        assert decoded == admin_offsets(scenario.bootstrap, group), group
    t = scenario.topic
    assert admin_offsets(scenario.bootstrap, scenario.offset_only) == {(t, 0): 7, (t, 1): 4}
    assert admin_offsets(scenario.bootstrap, scenario.classic) == {(t, 0): 10}


def test_every_formatter_record_matches_a_decoded_row(scenario: Scenario) -> None:
    partitions = sorted({partition_for_group(g, 5) for g in scenario.groups})
    printed = formatter_records(scenario.bootstrap, partitions)

    def from_formatter(rec: dict[str, Any]) -> tuple[Any, ...]:
        k, v = rec["key"]["data"], rec["value"]
        if v is None:
            return (k["group"], k["topic"], k["partition"], None, None, None, None, None)
        d = v["data"]
        epoch = d.get("leaderEpoch", -1)
        return (
            k["group"], k["topic"], k["partition"], d["offset"], None if epoch == -1 else epoch,
            d["metadata"], d["commitTimestamp"], v["version"],
        )  # fmt: skip

    def from_table(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["group_id"], r["topic"], r["partition"], r["committed_offset"], r["leader_epoch"],
            r["metadata"], r["commit_ms"], r["value_version"],
        )  # fmt: skip

    total = 0
    for p in partitions:
        expected = [from_formatter(r) for r in printed[p] if r["key"]["data"]["group"] in scenario.groups]
        ours = sorted((r for r in scenario.commits if r["log_partition"] == p), key=lambda r: r["log_offset"])
        assert [from_table(r) for r in ours] == expected, f"partition {p}"
        total += len(expected)
    # 2 classic + 1 classic deletion, 3 offset-only, 2 new-protocol, 1 committed tx, 2 doomed + 2 deletions
    assert total == len(scenario.commits) == 13


def test_aborted_transactional_commits_never_count(scenario: Scenario) -> None:
    tx_rows = [r for r in scenario.commits if r["group_id"] == scenario.tx]
    assert [(r["committed_offset"], r["record_kind"]) for r in tx_rows] == [(6, "commit")]
    # read_committed hides the markers that would say so: transactional is unknown, hence null.
    assert {r["transactional"] for r in scenario.commits} == {None}


def test_offset_and_group_deletion_are_tombstones(scenario: Scenario) -> None:
    classic = latest_per_partition(scenario.commits, scenario.classic)
    assert classic[(scenario.topic, 1)]["record_kind"] == "tombstone"
    assert classic[(scenario.topic, 1)]["committed_offset"] is None
    assert classic[(scenario.topic, 0)]["record_kind"] == "commit"
    doomed = latest_per_partition(scenario.commits, scenario.doomed)
    assert {r["record_kind"] for r in doomed.values()} == {"tombstone"}
    doomed_events = [e for e in scenario.events if e["group_id"] == scenario.doomed]
    assert doomed_events[-1]["record_kind"] == "tombstone"


def test_group_metadata_keeps_members_client_id_and_host(scenario: Scenario) -> None:
    classic = sorted(
        (e for e in scenario.events if e["group_id"] == scenario.classic), key=lambda e: e["log_offset"]
    )
    with_members = [e for e in classic if e["record_kind"] == "metadata" and json.loads(e["members"])]
    assert with_members, "a classic group writes metadata with its member"
    member = json.loads(with_members[-1]["members"])[0]
    assert member["client_id"] == f"client-{scenario.classic}"
    assert member["client_host"].endswith("127.0.0.1")
    assert with_members[-1]["protocol_type"] == "consumer"
    assert with_members[-1]["generation"] >= 1
    # Offset-only committers and new-protocol groups write no classic group metadata.
    assert not [e for e in scenario.events if e["group_id"] in (scenario.offset_only, scenario.new_protocol)]


def test_new_protocol_records_are_skipped_and_counted(scenario: Scenario) -> None:
    skipped = scenario.result.total["skipped_by_type"]
    assert skipped, "the KIP-848 group writes consumer-group records (types 3+)"
    assert all(int(t) >= 3 for t in skipped)
    assert scenario.result.total["quarantined"] == 0
    assert scenario.result.inserted == {
        GROUP_COMMITS: 13,
        GROUP_EVENTS: len(scenario.events),
        DECODE_ERRORS: 0,
    }


def test_ingesting_again_adds_nothing_then_exactly_the_new_commits(
    spark: SparkSession, scenario: Scenario
) -> None:
    cfg, t = scenario.cfg, scenario.topic
    again = ingest_offsets(spark, cfg, scenario.bootstrap, cfg.ingest.groups, run_id="run-2")
    assert again.total.get("read", 0) == 0
    assert len(table_rows(spark, cfg, GROUP_COMMITS)) == 13

    commit_offsets(
        scenario.bootstrap, scenario.offset_only, [TopicPartition(t, 0, 9), TopicPartition(t, 1, 10)]
    )
    third = ingest_offsets(spark, cfg, scenario.bootstrap, cfg.ingest.groups, run_id="run-3")
    assert third.inserted[GROUP_COMMITS] == 2
    rows = table_rows(spark, cfg, GROUP_COMMITS)
    new = sorted((r["partition"], r["committed_offset"]) for r in rows if r["ingest_run_id"] == "run-3")
    assert new == [(0, 9), (1, 10)]
    positions = {r["log_partition"]: r["next_offset"] for r in table_rows(spark, cfg, INGEST_POSITIONS)}
    assert {p["partition"]: p["end"] for p in third.partitions} == positions


def test_crash_between_data_and_positions_neither_loses_nor_duplicates(
    spark: SparkSession, scenario: Scenario, tmp_path: Path
) -> None:
    cfg = ingest_config(tmp_path, scenario.bootstrap, scenario.groups)
    # The crashed run: data written, positions never stored.
    plan = plan_ingest(spark, cfg, scenario.bootstrap, "crashed", cfg.ingest.groups)
    write_decoded(spark, cfg, scenario.bootstrap, plan)
    before = table_rows(spark, cfg, GROUP_COMMITS)
    assert before
    assert not DeltaTable.isDeltaTable(spark, tables_from_config(cfg).named(INGEST_POSITIONS))
    # A new commit lands while the job is down; the retry reads the same range and more.
    commit_offsets(scenario.bootstrap, scenario.offset_only, [TopicPartition(scenario.topic, 1, 12)])
    retry = ingest_offsets(spark, cfg, scenario.bootstrap, cfg.ingest.groups, run_id="retry")
    after = table_rows(spark, cfg, GROUP_COMMITS)
    coordinates = [(r["log_partition"], r["log_offset"]) for r in after]
    assert len(coordinates) == len(set(coordinates)), "no record twice"
    assert retry.inserted[GROUP_COMMITS] == 1
    assert len(after) == len(before) + 1
    assert {r["ingest_run_id"] for r in after} == {"crashed", "retry"}


def test_a_run_crashed_on_the_spark_path_is_finished_on_the_driver_path(
    spark: SparkSession, scenario: Scenario, tmp_path: Path
) -> None:
    """Both paths append under the same Delta transaction id and run marker: a run whose group_commits
    the Spark path wrote before it died is finished by the driver path (the CLI's with a local master)
    without writing that table twice, and the tables it lacked get their rows."""
    cfg = ingest_config(tmp_path, scenario.bootstrap, scenario.groups)
    on_spark = ingest_config(tmp_path, scenario.bootstrap, scenario.groups, "ingest.decode_on=spark")
    plan = plan_ingest(spark, on_spark, scenario.bootstrap, "crashed", cfg.ingest.groups)
    write_decoded(spark, on_spark, scenario.bootstrap, plan, [GROUP_COMMITS])  # died after one table
    before = len(table_rows(spark, cfg, GROUP_COMMITS))
    assert before >= 13
    retry = ingest_offsets(spark, cfg, scenario.bootstrap, cfg.ingest.groups, run_id="retry")
    assert any("crashed" in w and "group_events" in w for w in retry.warnings), retry.warnings
    commits = table_rows(spark, cfg, GROUP_COMMITS)
    assert len(commits) == before + retry.inserted[GROUP_COMMITS]
    assert len({(r["log_partition"], r["log_offset"]) for r in commits}) == len(commits), "no record twice"
    events = table_rows(spark, cfg, GROUP_EVENTS)
    crashed_events = sorted(
        (r["log_partition"], r["log_offset"]) for r in events if r["ingest_run_id"] == "crashed"
    )
    assert crashed_events == sorted((r["log_partition"], r["log_offset"]) for r in scenario.events)


def test_a_capped_read_stops_at_each_ranges_end_and_the_next_run_continues_there(
    spark: SparkSession, scenario: Scenario, tmp_path: Path
) -> None:
    """The driver path's consumer stops at the planned end of every range, also when the log goes on."""
    cfg = ingest_config(tmp_path, scenario.bootstrap, scenario.groups)
    capped = ingest_config(
        tmp_path, scenario.bootstrap, scenario.groups, "ingest.max_records_per_partition=2"
    )
    first = ingest_offsets(spark, capped, scenario.bootstrap, cfg.ingest.groups, run_id="capped")
    # read_committed: a range's transaction markers and aborted records are never read, so up to 2.
    assert all(p["read"] <= p["end"] - p["start"] <= 2 for p in first.partitions)
    assert any(p["end"] - p["start"] == 2 for p in first.partitions), "the cap cut some range short"
    rest = ingest_offsets(spark, cfg, scenario.bootstrap, cfg.ingest.groups, run_id="rest")
    assert {p["partition"]: p["start"] for p in rest.partitions} == {
        p["partition"]: p["end"] for p in first.partitions
    }
    rows = table_rows(spark, cfg, GROUP_COMMITS)
    assert len(rows) == len({(r["log_partition"], r["log_offset"]) for r in rows}), "no record twice"
    uncapped = ingest_config(tmp_path / "uncapped", scenario.bootstrap, scenario.groups)
    ingest_offsets(spark, uncapped, scenario.bootstrap, cfg.ingest.groups, run_id="uncapped")
    whole = {(r["log_partition"], r["log_offset"]) for r in table_rows(spark, uncapped, GROUP_COMMITS)}
    assert {(r["log_partition"], r["log_offset"]) for r in rows} == whole, "and none missing"


def test_undecodable_record_is_quarantined_with_bytes_and_reason(spark: SparkSession) -> None:
    kafka_like = spark.createDataFrame(
        [(2, 41, None, bytes([0, 1, 0]), b"\x00\x03")],
        "partition int not null, offset long not null, timestamp timestamp, key binary, value binary",
    )
    decoded = decode_on_executors(kafka_like)
    assert decoded.schema == DECODED_SCHEMA
    (row,) = table_frame(decoded, DECODE_ERRORS, "run-x").collect()
    assert (row.log_partition, row.log_offset) == (2, 41)
    assert (bytes(row.raw_key), bytes(row.raw_value)) == (b"\x00\x01\x00", b"\x00\x03")
    assert row.reason.startswith("truncated offset commit key")


@pytest.mark.parametrize("decode_on", ["driver", "spark"])
def test_a_commit_time_beyond_timestamp_range_keeps_its_row_with_a_null_time_and_warns(
    spark: SparkSession, bootstrap: str, tmp_path: Path, unique: str, decode_on: str
) -> None:
    """Crafted commit values (a client may send any commit timestamp) in a topic laid out as
    __consumer_offsets: the run succeeds on either path, every commit keeps its row and offset, a time
    beyond what a TIMESTAMP holds is null, one at the range's end is exact also when read back as
    reconcile reads the table (delta-rs), and the run counts and warns about the odd ones."""
    topic, group = f"offsets-like-{unique}", f"odd-times-{unique}"
    create_topic(bootstrap, topic, 1)
    producer = Producer(plain_conf(bootstrap))
    for p, value in enumerate([
        offset_commit_value(1, 10, "", 2**63 - 1, expire_ts=TIMESTAMP_MAX_MS),
        offset_commit_value(1, 11, "", TIMESTAMP_MIN_MS, expire_ts=-(2**63)),
        offset_commit_value(3, 12, "", TIMESTAMP_MAX_MS + 1),
    ]):  # fmt: skip
        producer.produce(topic, key=offset_commit_key(group, "t", p), value=value, partition=0)
    deliver(producer)
    cfg = ingest_config(
        tmp_path, bootstrap, [group], f"ingest.offsets_topic={topic}", f"ingest.decode_on={decode_on}"
    )
    result = ingest_offsets(spark, cfg, bootstrap, [group], run_id="odd")
    dataset = delta_rows.dataset(spark, tables_from_config(cfg).named(GROUP_COMMITS))
    assert dataset is not None
    rows = sorted(dataset.to_table().to_pylist(), key=lambda r: r["partition"])

    def at(ms: int) -> datetime:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)

    assert [(r["committed_offset"], r["commit_time"], r["expire_time"]) for r in rows] == [
        (10, None, at(TIMESTAMP_MAX_MS)),
        (11, at(TIMESTAMP_MIN_MS), None),
        (12, None, None),
    ]
    assert {k: result.total[k] for k in ("read", "decoded", "quarantined", "times_out_of_range")} == {
        "read": 3, "decoded": 3, "quarantined": 0, "times_out_of_range": 3,
    }  # fmt: skip
    assert result.inserted[DECODE_ERRORS] == 0
    assert [w for w in result.warnings if w.startswith(f"3 decoded records ({topic}-0: 3)")], result.warnings


def test_snapshot_mode_records_current_offsets_and_says_history_is_missing(
    spark: SparkSession, scenario: Scenario, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = ingest_config(tmp_path, scenario.bootstrap, [scenario.offset_only, scenario.classic])
    with caplog.at_level(logging.WARNING, logger="app.offsets_topic.snapshot"):
        ingest_offsets(
            spark,
            cfg,
            scenario.bootstrap,
            cfg.ingest.groups,
            run_id="snap",
            clock=lambda: 1_000,
            mode="snapshot",
        )
    assert "history" in caplog.text
    assert "unavailable" in caplog.text
    rows = table_rows(spark, cfg, GROUP_COMMITS)
    assert {r["record_kind"] for r in rows} == {"snapshot"}
    for group in cfg.ingest.groups:
        got = {(r["topic"], r["partition"]): r["committed_offset"] for r in rows if r["group_id"] == group}
        assert got == admin_offsets(scenario.bootstrap, group)


def test_cli_unreachable_broker_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"127.0.0.1:{free_port()}"
    conf = tmp_path / "conf"  # a minimal config of its own: independent of conf/*.yaml
    conf.mkdir()
    (conf / "base.yaml").write_text("ingest:\n  groups: [g1]\n")
    (conf / "local.yaml").write_text("")
    code = main([
        "ingest-offsets", "--conf-dir", str(conf), "--set", f"kafka.bootstrap_servers={dead}",
        "--set", "kafka.request_timeout_s=2", "--set", f"paths.data_dir={tmp_path}",
    ])  # fmt: skip
    assert code == 3
    assert "did not answer" in capsys.readouterr().err


def test_reconcile_reads_group_commits_where_ingest_writes_them_when_the_table_is_configured(
    spark: SparkSession, scenario: Scenario, tmp_path: Path
) -> None:
    """One key per table: `tables.group_commits` moves the table for ingest-offsets and reconcile alike."""
    elsewhere = tmp_path / "elsewhere" / "commits"
    cfg = ingest_config(tmp_path, scenario.bootstrap, scenario.groups, f"tables.group_commits={elsewhere}")
    ingest_offsets(spark, cfg, scenario.bootstrap, cfg.ingest.groups, run_id="moved")
    assert not (tmp_path / "tables" / GROUP_COMMITS).exists()
    read = read_group_commit_rows(
        AuditTables.from_config(cfg, spark).group_commits,
        AuditWindow(until=datetime.now(UTC)),
        scenario.groups,
        7,
    )
    written = DeltaTable.forPath(spark, str(elsewhere)).toDF().count()
    assert read.num_rows == written > 0
