"""A consumer group's committed offsets, read through a consumer of that group, never through the
Admin API's OffsetFetch (`AdminClient.list_consumer_group_offsets`).

Why not the Admin API: librdkafka (2.16, the newest release at the time of writing, and its main
branch) answers an Admin OffsetFetch that comes back NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE by
asking the client's consumer-group handle to look the coordinator up again
(`rd_kafka_handle_OffsetFetch` -> `rd_kafka_cgrp_op`). An AdminClient has no such handle, the pointer
is NULL, and the whole process dies with SIGSEGV. A group coordinator answers exactly that while it
loads its partitions: a broker that has just started, a first group on a new cluster, a coordinator
moving after a broker restart. A consumer created with the group's id has the handle, and the same
answer is retried inside librdkafka. It never subscribes, so it never joins the group or changes it:
OffsetFetch only reads.

`isolation.level=read_committed` makes the request ask for stable offsets, so a commit still inside
an open transaction is waited for (UNSTABLE_OFFSET_COMMIT, retried) rather than missed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from app.contracts.offsets import TopicPartitionKey
from app.kafka.clients import is_retriable, raise_partition_errors, retry_kafka
from app.kafka.commit import close_within

INTERNAL_TOPIC_PREFIX = "__"  # __consumer_offsets, __transaction_state, ...: no group commits to them


@dataclass(frozen=True)
class HeldOffset:
    """What a group holds for one partition: the next offset to read, as committed."""

    offset: int
    leader_epoch: int | None
    metadata: str


def group_reader_conf(conf: Mapping[str, Any], group_id: str) -> dict[str, Any]:
    """`conf` (the client settings) for a consumer that only reads `group_id`'s committed offsets."""
    return {
        **conf,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
    }


def readable_partitions(consumer: Consumer, timeout_s: float) -> list[TopicPartitionKey]:
    """Every partition of every topic the metadata shows as readable, internal topics excepted."""
    md = retry_kafka(lambda left: consumer.list_topics(timeout=left), "reading topic metadata", timeout_s)
    return sorted(
        (name, p)
        for name, meta in md.topics.items()
        if meta.error is None and not name.startswith(INTERNAL_TOPIC_PREFIX)
        for p in meta.partitions
    )


def held_offsets(
    consumer: Consumer, partitions: Sequence[TopicPartitionKey], timeout_s: float, what: str
) -> dict[TopicPartitionKey, HeldOffset]:
    """The offsets `consumer`'s group holds for `partitions`; a partition without a commit is absent.

    A partition answered with a retriable error is asked again, never taken for one without a commit."""
    if not partitions:
        return {}

    def ask(left: float) -> list[TopicPartition]:
        answered = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=left)
        raise_partition_errors(tp.error for tp in answered if tp.error is not None and is_retriable(tp.error))
        return list(answered)

    out = {}
    for tp in retry_kafka(ask, what, timeout_s):
        if tp.error is not None or tp.offset < 0:
            continue  # no committed offset for this partition
        epoch = tp.leader_epoch if tp.leader_epoch is not None and tp.leader_epoch >= 0 else None
        out[(tp.topic, tp.partition)] = HeldOffset(int(tp.offset), epoch, tp.metadata or "")
    return out


def group_offsets(
    conf: Mapping[str, Any],
    group_id: str,
    timeout_s: float,
    partitions: Sequence[TopicPartitionKey] | None = None,
) -> dict[TopicPartitionKey, HeldOffset]:
    """The offsets `group_id` holds, for `partitions`, or for every readable partition when None
    (a commit to a topic deleted since is not seen then: metadata no longer lists it).

    One budget of `timeout_s` for the metadata and the fetch; an unreachable broker or coordinator is
    KafkaUnavailableError (exit code 3 at the CLI)."""
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(group_reader_conf(conf, group_id))
    try:
        asked = list(partitions) if partitions is not None else readable_partitions(consumer, timeout_s)
        left = max(deadline - time.monotonic(), 0.001)
        return held_offsets(consumer, asked, left, f"reading the committed offsets of group {group_id}")
    finally:
        # A consumer that never subscribed has nothing to leave or commit: its close is quick, but a
        # broker gone meanwhile must not hold the caller.
        close_within(consumer, 10.0, f"the reader of group {group_id}'s offsets")
