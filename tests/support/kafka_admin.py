"""Group offsets changed from outside the job, as an operator's tools change them."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from app.kafka.clients import retry_kafka
from tests.support.streaming import KAFKA_TIMEOUT_S


def alter_group(admin: AdminClient, group: str, topic: str, partition: int, offset: int) -> None:
    """What `kafka-consumer-groups --reset-offsets --execute` does: the Admin API's offset commit."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition, offset)])
    retry_kafka(
        lambda left: admin.alter_consumer_group_offsets([request], request_timeout=left)[group].result(left),
        f"resetting {group}",
        KAFKA_TIMEOUT_S,
    )
