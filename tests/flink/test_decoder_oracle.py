"""The decoder against Flink's own State Processor API, on checkpoints a real Flink job just wrote.

For each stack and source, a job reads a real topic until it has retained checkpoints, takes a
savepoint and is cancelled (its checkpoints are retained on cancellation, so none is deleted while
it is read); then ``read_checkpoint`` and the oracle (``SavepointReader`` with the connector's own
serializers, in its own JVM) read the same directories and must agree on every partition. The large
variant's state is above the 20 kb inline threshold, so it is read from files beside ``_metadata``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from app.flink.metadata import FlinkCheckpointOffsets, read_checkpoint
from app.kafka.clients import plain_conf
from tests.flink.harness import FlinkJob, JobSpec, oracle
from tests.support.streaming import create_topic, deliver

pytestmark = pytest.mark.flink

# (stack, source, partitions): 1,000 partitions put ~40 kb of splits in each of the 2 subtasks' state.
VARIANTS = [
    ("1.20", "kafkasource", 3),
    ("1.20", "legacy", 3),
    ("2.2", "kafkasource", 3),
    ("1.20", "kafkasource", 1000),
]


def produce(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer(plain_conf(bootstrap, **{"linger.ms": 5}))
    for partition in range(partitions):
        for i in range(2 + partition % 5):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    deliver(producer)


def as_oracle(got: FlinkCheckpointOffsets) -> dict[str, Any]:
    return {
        "checkpoint_id": got.checkpoint_id,
        "engine": got.engine,
        "operator_id": got.operator_id,
        "offsets": sorted((o.topic, o.partition, o.raw_offset, o.stopping_offset) for o in got.offsets),
    }


def oracle_read(job: FlinkJob, path: Path) -> dict[str, Any]:
    read = oracle(job.stack, path, job.work_dir / "oracle.log")
    return {
        "checkpoint_id": read["checkpoint_id"],
        "engine": read["engine"],
        "operator_id": read["operator_id"],
        "offsets": sorted(
            (o["topic"], o["partition"], o["raw_offset"], o["stopping_offset"]) for o in read["offsets"]
        ),
    }


@pytest.mark.parametrize(("stack", "source", "partitions"), VARIANTS, ids=lambda v: str(v))
def test_the_decoder_reads_what_the_state_processor_api_reads(
    flink_job: Callable[..., FlinkJob],
    bootstrap: str,
    tmp_path: Path,
    stack: str,
    source: str,
    partitions: int,
) -> None:
    topic = f"flink-decoder-{stack.replace('.', '')}-{source}-{partitions}-{tmp_path.name}"
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, partitions)
    job = flink_job(stack, JobSpec(bootstrap, topic, f"{topic}-group", source=source))
    job.wait_checkpoints(3)
    savepoint = job.savepoint()
    job.cancel()
    checkpoints = job.retained()
    assert checkpoints, "no retained checkpoint"

    for path in [checkpoints[-1], savepoint]:
        got = read_checkpoint(str(path))
        assert as_oracle(got) == oracle_read(job, path), path
        assert len(got.offsets) == partitions
    if partitions >= 1000:
        state_files = [p for p in checkpoints[-1].iterdir() if p.name != "_metadata"]
        assert state_files, "the large source's state should be in files beside _metadata"
