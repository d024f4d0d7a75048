"""The Flink harness end to end: real Flink jobs on each stack reading a real broker, their retained
checkpoints read back by Flink's own State Processor API, a SIGKILL and a restore, a savepoint, a cancel.

One job per stack and source, shared by the module's tests (JVM start-ups dominate the tier's time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from app.contracts.vocabulary import ENGINE_FLINK_KAFKASOURCE, ENGINE_FLINK_LEGACY
from app.kafka.clients import plain_conf
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, oracle, wait_for
from tests.support.streaming import create_topic, deliver

pytestmark = pytest.mark.flink

PARTITIONS = 2
VARIANTS = ("1.20-kafkasource", "1.20-legacy", "2.2-kafkasource")


def produce(bootstrap: str, topic: str, counts: Mapping[int, int]) -> None:
    producer = Producer(plain_conf(bootstrap, **{"linger.ms": 5}))
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    deliver(producer)


def stored_offsets(result: dict[str, Any]) -> dict[int, int]:
    offsets = result["offsets"]
    return {int(o["partition"]): int(o["raw_offset"]) for o in offsets}


@dataclass
class Running:
    """The module's job for one variant and what was produced to its topic so far."""

    job: FlinkJob
    bootstrap: str
    ends: dict[int, int]
    # records the current process has to read to be caught up: a restored one starts from its state
    to_read: int

    @property
    def legacy(self) -> bool:
        return self.job.spec.source == "legacy"

    def expected_stored(self) -> dict[int, int]:
        """What Flink stores once every record is read: the next offset (the legacy consumer: the last
        one processed)."""
        return {p: end - 1 if self.legacy else end for p, end in self.ends.items()}

    def produce(self, counts: Mapping[int, int]) -> None:
        produce(self.bootstrap, self.job.spec.topic, counts)
        for p, n in counts.items():
            self.ends[p] = self.ends.get(p, 0) + n
        self.to_read += sum(counts.values())

    def wait_caught_up(self) -> dict[str, Any]:
        """Until the job has read every record produced, then a checkpoint triggered after that: its
        REST entry."""
        self.job.wait_records_read(self.to_read)
        return self.job.checkpoint_after_now()


@pytest.fixture(scope="module", params=VARIANTS)
def running(
    request: pytest.FixtureRequest,
    flink_stacks: Callable[[str], FlinkStack],
    bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Running]:
    stack, source = str(request.param).split("-")
    topic = f"flink-harness-{stack.replace('.', '')}-{source}-{tmp_path_factory.getbasetemp().name}"
    create_topic(bootstrap, topic, PARTITIONS)
    counts = {0: 30, 1: 45}
    produce(bootstrap, topic, counts)
    started: list[FlinkJob] = []
    spec = JobSpec(bootstrap, topic, f"{topic}-group", source=source)
    work = tmp_path_factory.mktemp(f"flink-{request.param}")
    try:
        job = FlinkJob(flink_stacks(stack), spec, work, on_start=started.append).start()
        yield Running(job, bootstrap, dict(counts), to_read=sum(counts.values()))
    finally:
        for j in started:
            j.stop()


def test_retained_checkpoints_hold_what_the_job_read(running: Running) -> None:
    running.job.wait_checkpoints(3)

    def latest_three_on_disk() -> bool | None:
        # a checkpoint completing between the REST read and the look at the disk subsumes the
        # oldest of the three: look again
        done = running.job.completed()[-3:]
        paths = [running.job.checkpoint_path(c) for c in done]
        return True if len(done) == 3 and all((p / "_metadata").is_file() for p in paths) else None

    wait_for(latest_three_on_disk, 30, "the 3 latest completed checkpoints at their external_path")
    # any checkpoint from the caught-up one on holds every record: the copy takes the newest still on disk
    last, path = running.job.copy_checkpoint(running.wait_caught_up())

    read = oracle(running.job.stack, path, running.job.work_dir / "oracle.log")

    assert read["checkpoint_id"] == int(last["id"])
    assert read["engine"] == (ENGINE_FLINK_LEGACY if running.legacy else ENGINE_FLINK_KAFKASOURCE)
    assert stored_offsets(read) == running.expected_stored()
    assert {o["topic"] for o in read["offsets"]} == {running.job.spec.topic}


def test_kill9_restore_savepoint_cancel(running: Running) -> None:
    before = running.wait_caught_up()
    # the newest completed checkpoint as REST reports it: a chk-N dir on disk may be one the kill
    # interrupted while it wrote _metadata
    latest = running.job.latest_completed()
    running.job.kill9()
    restore_from = running.job.checkpoint_path(latest)
    assert int(latest["id"]) >= int(before["id"])

    restarted = running.job.restart_from(restore_from)
    running.job = restarted
    running.to_read = 0  # the checkpoint it restored holds every record produced so far
    restored = wait_for(
        lambda: restarted.checkpoints()["latest"]["restored"], 60, "the restored checkpoint in REST"
    )
    assert int(restored["id"]) == int(restore_from.name[4:])
    assert Path(str(restored["external_path"]).removeprefix("file:")) == restore_from

    # an exact resume: the restored process reads the new records and not one more
    running.produce({0: 7, 1: 3})
    running.wait_caught_up()
    assert all(int(c["id"]) > int(restored["id"]) for c in restarted.completed())

    savepoint = restarted.savepoint()
    assert savepoint.name.startswith("savepoint-")
    assert (savepoint / "_metadata").is_file()
    assert stored_offsets(oracle(restarted.stack, savepoint, restarted.work_dir / "oracle.log")) == (
        running.expected_stored()
    )

    last_id = int(restarted.latest_completed()["id"])
    restarted.cancel()
    # RETAIN_ON_CANCELLATION: the checkpoints outlive the job
    kept = restarted.retained()
    assert kept
    assert int(kept[-1].name[4:]) >= last_id
