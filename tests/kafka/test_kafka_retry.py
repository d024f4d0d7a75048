"""retry_kafka against a real broker's own retriable error.

While a transaction holds a pending offset commit for a group, the broker answers a stable offset
fetch for that group with UNSTABLE_OFFSET_COMMIT: a retriable error that lasts exactly as long as the
transaction, so the test decides (event-driven, no timing) when it clears.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from app.errors import KafkaUnavailableError
from app.kafka.clients import plain_conf, raise_partition_errors, retry_kafka
from app.kafka.group_offsets import group_offsets
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka


class _OnRetry(logging.Handler):
    """Sets an event when retry_kafka says it will ask again."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.retried = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.retried.set()


@pytest.fixture
def on_retry() -> Iterator[_OnRetry]:
    logger = logging.getLogger("app.kafka.clients")
    handler, level = _OnRetry(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def pending_offset_commit(bootstrap: str, topic: str, group: str, offset: int) -> Producer:
    """A transaction that has sent `offset` for `group` and is still open.

    The tests then ask through the Admin API's OffsetFetch, the one request that returns
    UNSTABLE_OFFSET_COMMIT to the caller, and that request kills the process if the coordinator
    answers NOT_COORDINATOR (app.kafka.group_offsets). So the group's coordinator is first made
    to answer through a consumer of the group, which survives that answer and waits it out."""
    assert group_offsets(plain_conf(bootstrap), group, 60) == {}
    producer = Producer(plain_conf(bootstrap, **{"transactional.id": f"tx-{group}"}))
    producer.init_transactions(30)
    metadata = Consumer(plain_conf(bootstrap, **{"group.id": group}))
    try:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, offset)], metadata.consumer_group_metadata(), 30
        )
    finally:
        metadata.close()
    return producer


def stable_offsets(admin: AdminClient, topic: str, group: str) -> Any:
    def ask(left: float) -> dict[int, int]:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
        answer = admin.list_consumer_group_offsets(request, require_stable=True, request_timeout=left)
        partitions = answer[group].result(left).topic_partitions
        raise_partition_errors(tp.error for tp in partitions)
        return {tp.partition: tp.offset for tp in partitions}

    return ask


def test_a_retriable_broker_error_is_retried_until_it_clears(
    bootstrap: str, unique: str, on_retry: _OnRetry
) -> None:
    topic, group = f"retry-{unique}", f"retry-{unique}"
    create_topic(bootstrap, topic, 1)
    producer = pending_offset_commit(bootstrap, topic, group, 7)

    # The transaction commits once the helper has met the error and decided to ask again.
    def finish() -> None:
        if on_retry.retried.wait(120):
            producer.commit_transaction(30)

    finisher = threading.Thread(target=finish, daemon=True)
    finisher.start()

    offsets = retry_kafka(
        stable_offsets(AdminClient(plain_conf(bootstrap)), topic, group), "stable offset fetch", 120
    )

    assert on_retry.retried.is_set()
    assert offsets == {0: 7}
    finisher.join(60)


def test_a_retriable_broker_error_that_outlasts_the_deadline_is_kafka_unavailable(
    bootstrap: str, unique: str
) -> None:
    topic, group = f"stuck-{unique}", f"stuck-{unique}"
    create_topic(bootstrap, topic, 1)
    producer = pending_offset_commit(bootstrap, topic, group, 3)
    try:
        with pytest.raises(KafkaUnavailableError, match=r"did not answer within 2s .*UNSTABLE_OFFSET_COMMIT"):
            retry_kafka(
                stable_offsets(AdminClient(plain_conf(bootstrap)), topic, group), "stable offset fetch", 2
            )
    finally:
        producer.abort_transaction(30)
