"""The faults of issue 26's test list on users' own jobs not covered by test_sink_modes.py (real
broker, Spark, Delta; the jobs are tests/kafka/user_jobs.py's, the audit attached in one line).

Both jobs run in one driver process (`crash`), killed with SIGKILL once each is under way, so one
driver's start pays for both crashes; each is then restarted on its checkpoint in this process and
its other faults come together, each over offsets of its own, so one reconciliation of the window
names them all (each job has a ledger, a sink and an audit of its own: no fault of one can hide
one of the other's). Each test asserts one claim on what a job's life left:

(c) a 1:1 copy whose coordinate columns have the team's own names, over `subscribePattern` with a
    topic created while the job runs, in `coordinates` mode (`copy_life`): killed and restarted,
    nothing at warn or above; then its checkpoint deleted and restarted from `latest` (RESTART_SKIP
    over exactly the records in between, and GAP over them: the sink lacks them), the sink restored
    to before the new query's last batch (GAP over exactly that batch's offsets) and the old
    query's last batch appended a second time (DUPLICATE over exactly its offsets);
(b) a foreachBatch MERGE with txn ids, in `delta_batches` mode (`merge_life`): killed and
    restarted, nothing at warn or above; then its checkpoint deleted and restarted from `latest`
    under the same txnAppId (RESTART_SKIP over the skipped ranges, and BATCH_NOT_IN_SINK over every
    batch of the new query: Delta skipped its writes as the old query's batches of the same ids).
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.audit import attach
from app.config import AppConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import TopicPartitionKey
from app.incidents.io import read_incidents
from app.storage.handles import AuditTables
from tests.kafka.user_jobs import (
    COPY_COLUMNS,
    JOB,
    MERGE_APP_ID,
    PARTITIONS,
    PER_TRIGGER,
    at_least_warn,
    audit_config,
    checkpoint_batches,
    copy_settings,
    kafka,
    produce_payments,
    reconcile,
    run_then_kill,
    run_to_end,
    sink_version_of,
    start_job,
)
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

Ranges = dict[TopicPartitionKey, tuple[int, int]]


def committed(checkpoint: Path) -> dict[int, dict[TopicPartitionKey, int]]:
    """The checkpoint's committed batches, none before the query created its commit log."""
    return checkpoint_batches(checkpoint) if (checkpoint / "commits").is_dir() else {}


def batch_ranges(batches: dict[int, dict[TopicPartitionKey, int]], batch: int) -> Ranges:
    """[start, end) of every partition ``batch`` read records of; a partition new in the batch
    starts at 0 (Spark reads a partition that appears mid-run from its earliest offset)."""
    before = batches.get(batch - 1, {})
    spans = {tp: (before.get(tp, 0), end) for tp, end in batches[batch].items()}
    return {tp: (start, end) for tp, (start, end) in spans.items() if end > start}


def found_ranges(found: list[Any], finding_type: str) -> Ranges:
    named = [f for f in found if f.finding_type == finding_type]
    ranges = {(f.topic, f.partition): (f.offset_start, f.offset_end) for f in named}
    assert len(ranges) == len(named), f"more than one {finding_type} for a partition: {named}"
    return ranges


def run_attached(
    spark: SparkSession,
    bootstrap: str,
    kind: str,
    source: tuple[str, str],
    root: Path,
    starting: str = "earliest",
) -> str:
    """Job ``kind`` run in this process to the end of what ``source`` (Spark's subscription option
    and its value) holds, attached; its query id. Its checkpoint, sink and ledger are under ``root``."""
    how, what = source
    raw = kafka(spark, bootstrap, how, what, starting)
    query = start_job(kind, raw, root / "cp", root / "sink")
    audit = attach(query, job_name=JOB, ledger=str(root / "ledger"))
    run_to_end(query, audit)
    return str(query.id)


def starting_offsets(offsets: dict[TopicPartitionKey, int]) -> str:
    """Spark's startingOffsets JSON for exactly ``offsets``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out)


def append_again(spark: SparkSession, sink: Path, ranges: Ranges) -> None:
    """A non-idempotent writer's retry: the rows of ``ranges`` appended to the sink once more."""
    topic, partition, offset = (F.col(c) for c in COPY_COLUMNS.values())
    wanted = F.lit(False)
    for (t, p), (start, end) in ranges.items():
        wanted = wanted | ((topic == t) & (partition == p) & (offset >= start) & (offset < end))
    table = spark.read.format("delta").load(str(sink))
    rows = table.where(wanted).collect()
    assert len(rows) == sum(end - start for start, end in ranges.values())
    spark.createDataFrame(rows, table.schema).write.format("delta").mode("append").save(str(sink))


COPY_FIRST, COPY_LATE = 8 * PER_TRIGGER, 2 * PER_TRIGGER  # records of (c)'s first and late topic
MERGED = 6 * PER_TRIGGER  # records of (b)'s topic
SKIPPED = PER_TRIGGER  # per topic, produced while a job is down with its checkpoint deleted


@dataclass(frozen=True)
class Job:
    """One job of the killed driver: its directory (checkpoint `cp`, sink, ledger) and topics."""

    root: Path
    topics: tuple[str, ...]
    subscription: tuple[str, str]  # Spark's subscription option and its value

    @property
    def checkpoint(self) -> Path:
        return self.root / "cp"

    @property
    def sink(self) -> Path:
        return self.root / "sink"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger"

    def driver_args(self, kind: str) -> list[str]:
        return [kind, self.subscription[1], str(self.checkpoint), str(self.sink), str(self.ledger)]


@dataclass(frozen=True)
class Crash:
    """Both jobs' driver, killed once: where each had got to."""

    copy: Job
    merge: Job
    since: datetime
    copy_ends_at_kill: dict[TopicPartitionKey, int]
    merge_batches_at_kill: int


@pytest.fixture(scope="module")
def crash(spark: SparkSession, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Crash:
    unique = uuid.uuid4().hex[:10]
    first, late = f"copy-{unique}-a", f"copy-{unique}-b"
    copy = Job(tmp_path_factory.mktemp("copy"), (first, late), ("subscribePattern", f"copy-{unique}-.*"))
    merge_topic = f"merge-{unique}"
    merge = Job(tmp_path_factory.mktemp("merge"), (merge_topic,), ("subscribe", merge_topic))
    create_topic(bootstrap, first, PARTITIONS)
    create_topic(bootstrap, merge_topic, PARTITIONS)
    produce_payments(bootstrap, first, COPY_FIRST)
    spark.createDataFrame([], "id LONG, amount DOUBLE").write.format("delta").save(str(merge.sink))
    since = datetime.now(UTC) - timedelta(minutes=1)

    under_way: list[str] = []

    def both_under_way() -> bool | None:
        """Once (c) completed a batch, the late topic is created and (b)'s records produced (so
        that (b) cannot read all of them while (c) finds the new topic); then until a completed
        batch of (c) read the late topic (its partition set grew while it ran) and (b) completed
        two batches."""
        copied = committed(copy.checkpoint)
        if not copied:
            return None
        if not under_way:
            create_topic(bootstrap, late, PARTITIONS)
            produce_payments(bootstrap, late, COPY_LATE)
            produce_payments(bootstrap, merge_topic, MERGED)
            under_way.append(late)
        late_read = any((late, 0) in ends for ends in copied.values())
        return True if late_read and len(committed(merge.checkpoint)) >= 2 else None

    driver = [bootstrap, *copy.driver_args("c")[1:], JOB, str(copy.root / "driver"), "c"]
    run_then_kill(
        [*driver, "--also", *merge.driver_args("b")], both_under_way, "the late topic and two merges"
    )
    copied = committed(copy.checkpoint)
    return Crash(copy, merge, since, copied[max(copied)], len(committed(merge.checkpoint)))


def run_job(spark: SparkSession, bootstrap: str, kind: str, job: Job, starting: str = "earliest") -> str:
    return run_attached(spark, bootstrap, kind, job.subscription, job.root, starting)


# --- (c): the copy job ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CopyLife:
    crash: Crash
    query_id: str
    log_ends: dict[TopicPartitionKey, int]
    restarted_ends: dict[TopicPartitionKey, int]  # the last batch's ends after the restart on the checkpoint
    clean: list[Any]
    second_query: str
    new_batches: int
    skips: Ranges
    lost: Ranges
    doubled: Ranges
    found: list[Any]


@pytest.fixture(scope="module")
def copy_life(spark: SparkSession, bootstrap: str, crash: Crash) -> CopyLife:
    job = crash.copy
    first, late = job.topics
    produced = {first: COPY_FIRST, late: COPY_LATE}
    query_id = run_job(spark, bootstrap, "c", job)
    batches = checkpoint_batches(job.checkpoint)
    last = max(batches)
    log_ends = {(t, p): n // PARTITIONS for t, n in produced.items() for p in range(PARTITIONS)}
    cfg = audit_config(job.root, bootstrap, job.sink, job.ledger, *copy_settings(), mode="coordinates")
    clean = reconcile(spark, cfg, "rec-clean", crash.since)

    # Three faults, each over offsets of its own, then one reconciliation names each: the
    # checkpoint deleted while records arrive and the job restarted from `latest` (RESTART_SKIP
    # over the records in between, and in this mode the sink's GAP over them), the sink restored
    # to before the new query's last batch (GAP over exactly its offsets), and the old query's
    # last batch appended a second time by a writer that does not check txn ids (DUPLICATE).
    shutil.rmtree(job.checkpoint)
    for topic in (first, late):
        produce_payments(bootstrap, topic, SKIPPED, start=produced[topic])
    latest = {tp: end + SKIPPED // PARTITIONS for tp, end in log_ends.items()}
    produce_payments(bootstrap, first, 2 * PER_TRIGGER, start=produced[first] + SKIPPED)  # two batches
    second = run_job(spark, bootstrap, "c", job, starting_offsets(latest))
    new_batches = checkpoint_batches(job.checkpoint)
    lost = batch_ranges(new_batches, 1)
    restore_to = sink_version_of(job.sink, 1, second) - 1
    spark.sql(f"RESTORE TABLE delta.`{job.sink}` TO VERSION AS OF {restore_to}")
    doubled = batch_ranges(batches, last)
    append_again(spark, job.sink, doubled)
    found = reconcile(spark, cfg, "rec-faults", crash.since)
    skips = {tp: (log_ends[tp], latest[tp]) for tp in latest}
    return CopyLife(
        crash, query_id, log_ends, batches[last], clean, second, len(new_batches), skips, lost, doubled, found
    )


def test_copy_job_killed_before_it_read_everything(copy_life: CopyLife) -> None:
    first = copy_life.crash.copy.topics[0]
    assert copy_life.crash.copy_ends_at_kill[(first, 0)] < COPY_FIRST // PARTITIONS


def test_copy_job_restarted_on_its_checkpoint_reads_every_topic_the_pattern_grew_to(
    copy_life: CopyLife,
) -> None:
    assert copy_life.restarted_ends == copy_life.log_ends


def test_copy_job_killed_and_restarted_leaves_nothing_at_warn(copy_life: CopyLife) -> None:
    assert at_least_warn(copy_life.clean) == []
    assert vocab.UNCLEAN_STOP in {
        f.finding_type for f in copy_life.clean
    }  # the kill was seen, and judged harmless


def test_copy_job_with_a_new_checkpoint_is_a_new_query_of_two_batches(copy_life: CopyLife) -> None:
    assert copy_life.second_query != copy_life.query_id
    assert copy_life.new_batches == 2


def test_copy_job_restart_from_latest_is_a_restart_skip_over_exactly_the_records_in_between(
    copy_life: CopyLife,
) -> None:
    assert found_ranges(copy_life.found, vocab.RESTART_SKIP) == copy_life.skips


def test_copy_job_gaps_are_the_skipped_records_and_the_restored_batch(copy_life: CopyLife) -> None:
    named = [f for f in copy_life.found if f.finding_type == vocab.GAP]
    gaps = [(f.topic, f.partition, f.offset_start, f.offset_end) for f in named]
    expected = [
        (*tp, start, end) for r in (copy_life.skips, copy_life.lost) for tp, (start, end) in r.items()
    ]
    assert sorted(gaps) == sorted(expected)


def test_copy_job_batch_appended_twice_is_a_duplicate_over_exactly_its_offsets(copy_life: CopyLife) -> None:
    assert found_ranges(copy_life.found, vocab.DUPLICATE) == copy_life.doubled


def test_copy_job_faults_are_all_that_is_at_warn_or_above(copy_life: CopyLife) -> None:
    gaps = len(copy_life.skips) + len(copy_life.lost)
    assert sorted(at_least_warn(copy_life.found)) == sorted(
        [(vocab.GAP, vocab.CRITICAL)] * gaps
        + [(vocab.DUPLICATE, vocab.ERROR)] * len(copy_life.doubled)
        + [(vocab.RESTART_SKIP, vocab.CRITICAL)] * len(copy_life.skips)
    )


# --- (b): the MERGE job --------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeLife:
    crash: Crash
    cfg: AppConfig
    first: str
    reached: dict[TopicPartitionKey, int]
    killed: list[Any]
    second: str
    latest: dict[TopicPartitionKey, int]
    max_old_batch: int
    max_new_batch: int
    lost: dict[tuple[int, TopicPartitionKey], tuple[int, int]]
    after: list[Any]


@pytest.fixture(scope="module")
def merge_life(spark: SparkSession, bootstrap: str, crash: Crash) -> MergeLife:
    job = crash.merge
    first = run_job(spark, bootstrap, "b", job)
    batches = checkpoint_batches(job.checkpoint)
    reached = batches[max(batches)]
    app_id = f"reconcile.sink_app_id_by_job.{JOB}={MERGE_APP_ID}"
    cfg = audit_config(job.root, bootstrap, job.sink, job.ledger, app_id)
    killed = reconcile(spark, cfg, "rec-killed", crash.since)

    shutil.rmtree(job.checkpoint)
    (topic,) = job.topics
    produce_payments(bootstrap, topic, SKIPPED, start=MERGED)
    latest = {tp: end + SKIPPED // PARTITIONS for tp, end in reached.items()}
    produce_payments(bootstrap, topic, PER_TRIGGER, start=MERGED + SKIPPED)
    second = run_job(spark, bootstrap, "b", job, starting_offsets(latest))
    after = reconcile(spark, cfg, "rec-latest", crash.since)

    # The second query's batch ids start at 0 again under the same txnAppId: Delta skipped its
    # MERGEs as already applied (the first query's batches of those ids), so its output is lost.
    renewed = checkpoint_batches(job.checkpoint)
    spans = {
        (b, tp): (renewed[b - 1][tp] if b - 1 in renewed else latest[tp], end)
        for b in renewed
        for tp, end in renewed[b].items()
    }
    lost = {key: span for key, span in spans.items() if span[1] > span[0]}
    return MergeLife(
        crash, cfg, first, reached, killed, second, latest, max(batches), max(renewed), lost, after
    )


def test_merge_job_killed_before_it_read_everything(merge_life: MergeLife) -> None:
    assert merge_life.crash.merge_batches_at_kill < MERGED // PER_TRIGGER


def test_merge_job_restarted_on_its_checkpoint_reads_to_the_end(merge_life: MergeLife) -> None:
    (topic,) = merge_life.crash.merge.topics
    assert merge_life.reached == {(topic, p): MERGED // PARTITIONS for p in range(PARTITIONS)}


def test_merge_job_killed_and_restarted_leaves_nothing_at_warn(merge_life: MergeLife) -> None:
    assert at_least_warn(merge_life.killed) == []
    assert vocab.UNCLEAN_STOP in {f.finding_type for f in merge_life.killed}


def test_merge_job_restart_from_latest_is_a_new_query_and_a_restart_skip_over_the_skipped_ranges(
    merge_life: MergeLife,
) -> None:
    assert merge_life.second != merge_life.first
    latest = merge_life.latest
    assert found_ranges(merge_life.after, vocab.RESTART_SKIP) == {
        tp: (merge_life.reached[tp], latest[tp]) for tp in latest
    }


def test_merge_job_batches_skipped_by_delta_as_already_applied_are_lost(merge_life: MergeLife) -> None:
    assert (
        merge_life.max_new_batch <= merge_life.max_old_batch
    )  # every new batch id is one the old query wrote
    assert sum(end - start for start, end in merge_life.lost.values()) == PER_TRIGGER
    named = [f for f in merge_life.after if f.finding_type == vocab.BATCH_NOT_IN_SINK]
    found = {(f.checkpoint_id, (f.topic, f.partition)): (f.offset_start, f.offset_end) for f in named}
    assert found == merge_life.lost
    assert {(f.severity, f.status) for f in named} == {(vocab.CRITICAL, vocab.CONFIRMED)}
    assert vocab.BATCH_WRITTEN_TWICE not in {f.finding_type for f in merge_life.after}


def test_merge_job_lost_batches_are_critical_incidents_of_their_records(
    spark: SparkSession, merge_life: MergeLife
) -> None:
    incidents = [
        i
        for i in read_incidents(AuditTables.from_config(merge_life.cfg, spark).incidents)
        if i.kind == vocab.INCIDENT_LOST_BATCH
    ]
    assert sum(i.impact.records_lost or 0 for i in incidents) == PER_TRIGGER
    assert {i.severity for i in incidents} == {vocab.CRITICAL}
