"""Gap confirmation against a real broker: a real gap, transaction markers and aborted records,
and offsets already removed by retention are told apart."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from app.config import KafkaConfig
from app.kafka.clients import plain_conf
from app.kafka.gaps import SuspectedGap, kafka_gap_confirmer
from tests.kafka.streaming import create_topic

pytestmark = pytest.mark.kafka


def test_confirmation_tells_real_gaps_from_markers_aborts_and_retention(bootstrap: str, unique: str) -> None:
    admin = AdminClient(plain_conf(bootstrap))
    txn_topic, old_topic = f"txn-{unique}", f"retained-{unique}"
    create_topic(bootstrap, txn_topic, 1)
    create_topic(bootstrap, old_topic, 1)

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{unique}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):  # offsets 0, 1, 2
        producer.produce(txn_topic, value=f"committed-{i}".encode(), partition=0)
    producer.commit_transaction(30)  # COMMIT marker at 3
    producer.begin_transaction()
    for i in range(2):  # offsets 4, 5
        producer.produce(txn_topic, value=f"aborted-{i}".encode(), partition=0)
    producer.flush(30)
    producer.abort_transaction(30)  # ABORT marker at 6
    producer.begin_transaction()
    producer.produce(txn_topic, value=b"after", partition=0)  # offset 7
    producer.commit_transaction(30)  # marker at 8

    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        plain.produce(old_topic, value=f"v{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    deleted = admin.delete_records([TopicPartition(old_topic, 0, 5)])
    for future in deleted.values():
        future.result(30)  # log start offset is now 5

    confirm = kafka_gap_confirmer(
        KafkaConfig(bootstrap_servers=bootstrap), bootstrap, max_records=100, timeout_s=20
    )
    gaps = [
        SuspectedGap(txn_topic, 0, 1, 2),  # a committed data record: a real gap
        SuspectedGap(txn_topic, 0, 3, 4),  # the commit marker
        SuspectedGap(txn_topic, 0, 4, 7),  # aborted records and the abort marker
        SuspectedGap(old_topic, 0, 1, 4),  # deleted by retention
        SuspectedGap(old_topic, 0, 3, 7),  # partly deleted, partly still there
    ]
    verdicts = confirm(gaps)

    assert [v["status"] for v in verdicts] == ["confirmed", "benign", "benign", "unverifiable", "confirmed"]
    assert verdicts[0]["data_records"] == 1
    assert verdicts[0]["sample_offsets"] == [1]
    assert verdicts[3]["log_start_offset"] == 5
    assert verdicts[3]["offsets_below_log_start"] == 3
    assert verdicts[4]["sample_offsets"] == [5, 6]
    assert verdicts[4]["offsets_below_log_start"] == 2
