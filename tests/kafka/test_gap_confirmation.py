"""Gap confirmation against a real broker: a real gap, transaction markers and aborted records,
and offsets already removed by retention are told apart, for all gaps of a run read together."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from app.config import KafkaConfig
from app.kafka.clients import plain_conf
from app.kafka.gaps import SuspectedGap, kafka_gap_confirmer
from tests.support.streaming import create_topic, deliver

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
    deliver(plain)
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


TXN_PARTITIONS = 8  # partitions 0-7: transactions; 8: retention; 9: a long plain log
RETAINED, LONG = TXN_PARTITIONS, TXN_PARTITIONS + 1


def judged(
    status: str,
    low: int,
    high: int,
    sample: list[int],
    *,
    found: int | None = None,
    capped: bool = False,
    below: int = 0,
    beyond: int = 0,
) -> dict[str, Any]:
    """The verdict the confirmer writes for one gap, every field spelled out."""
    verdict: dict[str, Any] = {
        "log_start_offset": low,
        "high_watermark": high,
        "data_records": len(sample) if found is None else found,
        "data_records_capped": capped,
        "sample_offsets": sample,
        "offsets_below_log_start": below,
        "offsets_beyond_high_watermark": beyond,
        "status": status,
    }
    if status == "benign":
        verdict["explanation"] = "no committed data records: transaction markers, aborted or compacted"
    return verdict


def test_all_gaps_of_a_run_are_judged_together_as_each_would_be_alone(bootstrap: str, unique: str) -> None:
    topic = f"many-{unique}"
    create_topic(bootstrap, topic, TXN_PARTITIONS + 2)

    # Partitions 0-7, every one: data 0, 1, commit marker 2; aborted 3, 4, abort marker 5;
    # data 6, 7, commit marker 8. High watermark 9.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{unique}"})
    producer.init_transactions(30)
    for commit in (True, False, True):
        producer.begin_transaction()
        for p in range(TXN_PARTITIONS):
            for i in range(2):
                producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    # Partition 8: offsets 0-9, then 0-4 deleted by retention. Partition 9: offsets 0-2499.
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        plain.produce(topic, value=f"r{i}".encode(), partition=RETAINED)
    for i in range(2500):
        plain.produce(topic, value=f"l{i}".encode(), partition=LONG)
    deliver(plain)
    admin = AdminClient(plain_conf(bootstrap))
    for future in admin.delete_records([TopicPartition(topic, RETAINED, 5)]).values():
        future.result(30)

    def gap(partition: int, start: int, end: int) -> SuspectedGap:
        return SuspectedGap(topic, partition, start, end)

    cases: list[tuple[SuspectedGap, dict[str, Any]]] = []
    for p in range(TXN_PARTITIONS):
        cases += [
            (gap(p, 6, 8), judged("confirmed", 0, 9, [6, 7])),
            (gap(p, 1, 2), judged("confirmed", 0, 9, [1])),
            (gap(p, 2, 6), judged("benign", 0, 9, [])),  # commit marker, aborted records, abort marker
            (gap(p, 8, 12), judged("benign", 0, 9, [], beyond=3)),  # the last marker, then nothing yet
            (gap(p, 0, 7), judged("confirmed", 0, 9, [0, 1, 6])),  # overlaps three of the others
        ]
    cases += [
        (gap(RETAINED, 1, 4), judged("unverifiable", 5, 10, [], below=3)),
        (gap(RETAINED, 3, 7), judged("confirmed", 5, 10, [5, 6], below=2)),
        (gap(RETAINED, 0, 5), judged("unverifiable", 5, 10, [], below=5)),
        (gap(LONG, 10, 13), judged("confirmed", 0, 2500, [10, 11, 12])),
        # Far beyond the previous gap: the read skips ahead instead of reading the offsets between.
        (gap(LONG, 2400, 2403), judged("confirmed", 0, 2500, [2400, 2401, 2402])),
        # More records than max_records: the count stops there, the sample at 10.
        (gap(LONG, 1500, 1600), judged("confirmed", 0, 2500, list(range(1500, 1510)), found=50, capped=True)),
    ]
    gaps = [g for g, _ in cases]

    confirm = kafka_gap_confirmer(
        KafkaConfig(bootstrap_servers=bootstrap), bootstrap, max_records=50, timeout_s=30
    )
    assert confirm(gaps) == [expected for _, expected in cases]
    # The order of the gaps changes nothing: each verdict is the one its gap would get alone.
    assert confirm(gaps[::-1]) == [expected for _, expected in cases[::-1]]
