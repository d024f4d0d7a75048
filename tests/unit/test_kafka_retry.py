"""The one retry helper for Kafka calls and the filter that keeps librdkafka's repeats out of the log."""

from __future__ import annotations

import concurrent.futures
import logging
import re
import time as clock
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from app.config import KafkaConfig
from app.errors import KafkaUnavailableError
from app.kafka.clients import (
    LIBRDKAFKA_LOGGER,
    RepeatFilter,
    is_retriable,
    librdkafka_conf,
    librdkafka_logger,
    plain_conf,
    raise_partition_errors,
    retry_kafka,
)

pytestmark = pytest.mark.unit


class FakeTime:
    """A clock that moves only when the code under test sleeps (or a call takes time)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Flaky:
    """A call that raises KafkaException(code) for each code in turn, then answers; it records the
    time left it was given on each attempt, and may take `cost_s` of the fake time per attempt."""

    def __init__(self, codes: list[int], cost_s: float = 0.0, time: FakeTime | None = None) -> None:
        self.codes = codes
        self.cost_s = cost_s
        self.time = time
        self.given: list[float] = []

    def __call__(self, left: float) -> str:
        self.given.append(left)
        if self.time is not None:
            self.time.now += self.cost_s
        if len(self.given) <= len(self.codes):
            raise KafkaException(KafkaError(self.codes[len(self.given) - 1]))
        return "answer"


def run(call: Callable[[float], str], time: FakeTime, timeout_s: float = 10.0) -> str:
    return retry_kafka(
        call, "reading the group's committed offsets", timeout_s, clock=time.clock, sleep=time.sleep
    )


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    ],
)
def test_retriable_errors_are_retried_until_the_call_answers(code: int) -> None:
    time = FakeTime()
    call = Flaky([code, code])
    assert run(call, time) == "answer"
    assert len(call.given) == 3
    assert time.sleeps == [0.1, 0.2]  # exponential backoff


def test_librdkafka_retriable_flag_counts_too() -> None:
    flagged = KafkaError(KafkaError.INVALID_REQUEST, "x", retriable=True)
    assert is_retriable(flagged)
    assert not is_retriable(KafkaError(KafkaError.INVALID_REQUEST))
    assert is_retriable(KafkaError(KafkaError.NOT_COORDINATOR))  # confluent-kafka leaves the flag off


def test_non_retriable_error_fails_at_once_naming_the_request_and_error() -> None:
    time = FakeTime()
    call = Flaky([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaUnavailableError, match="committed offsets failed: GROUP_AUTHORIZATION_FAILED"):
        run(call, time)
    assert len(call.given) == 1
    assert time.sleeps == []


def test_a_retriable_error_past_the_deadline_is_kafka_unavailable() -> None:
    time = FakeTime()
    call = Flaky([KafkaError.NOT_COORDINATOR] * 1000)
    with pytest.raises(
        KafkaUnavailableError, match=r"did not answer within 20s \(\d+ attempts, last error NOT_COORDINATOR"
    ):
        run(call, time, timeout_s=20)
    assert sum(time.sleeps) == pytest.approx(20.0)  # never sleeps past the deadline
    assert time.sleeps[:7] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]  # capped


def test_the_deadline_error_names_what_kafka_said_rather_than_the_last_short_timeout() -> None:
    time = FakeTime()
    call = Flaky([KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError._TIMED_OUT] * 100, cost_s=0.5, time=time)
    with pytest.raises(KafkaUnavailableError, match="last error UNSTABLE_OFFSET_COMMIT"):
        run(call, time, timeout_s=5)


def test_each_attempt_gets_only_the_time_left() -> None:
    time = FakeTime()
    call = Flaky([KafkaError._TIMED_OUT], cost_s=4.0, time=time)
    assert run(call, time, timeout_s=10) == "answer"
    assert call.given == [10.0, pytest.approx(10 - 4 - 0.1)]


def test_a_future_that_times_out_is_retried_like_a_kafka_timeout() -> None:
    time = FakeTime()
    attempts: list[float] = []

    def call(left: float) -> str:
        attempts.append(left)
        if len(attempts) == 1:
            raise concurrent.futures.TimeoutError()
        return "answer"

    assert run(call, time) == "answer"


def test_partition_errors_are_raised_for_the_retry_to_judge() -> None:
    raise_partition_errors([None, None])
    with pytest.raises(KafkaException) as raised:
        raise_partition_errors([None, KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)])
    assert raised.value.args[0].code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS


def record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(LIBRDKAFKA_LOGGER, level, __file__, 1, message, None, None)


def test_repeat_filter_drops_repeats_that_differ_only_in_numbers_until_the_interval_passed() -> None:
    time = FakeTime()
    repeats = RepeatFilter(interval_s=60, clock=time.clock)
    first = "FAIL [rdkafka#consumer-1]: Connect to ipv4#127.0.0.1:1 failed (after 2ms in state CONNECT)"
    again = "FAIL [rdkafka#consumer-3]: Connect to ipv4#127.0.0.1:1 failed (after 0ms in state CONNECT)"
    assert repeats.filter(record(first))
    assert not repeats.filter(record(again))
    assert repeats.filter(record("ERROR: something else"))
    assert repeats.filter(record(again, logging.WARNING))  # another level is another message
    time.now += 61
    assert repeats.filter(record(again))  # a later outage shows again


def test_repeat_filter_forgets_the_oldest_messages_beyond_its_bound() -> None:
    repeats = RepeatFilter(clock=lambda: 0.0, max_keys=2)
    for message in ("a", "b", "c"):
        assert repeats.filter(record(message))
    assert repeats.filter(record("a"))  # evicted, so let through again
    assert not repeats.filter(record("c"))


def test_every_client_conf_logs_through_python_logging_at_warning() -> None:
    conf = librdkafka_conf(KafkaConfig(bootstrap_servers="h:9092"), "h:9092")
    assert conf["logger"] is librdkafka_logger() is logging.getLogger(LIBRDKAFKA_LOGGER)
    assert conf["logger"].getEffectiveLevel() == logging.WARNING
    assert sum(isinstance(f, RepeatFilter) for f in conf["logger"].filters) == 1  # configured once


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def librdkafka_records() -> Iterator[_Records]:
    handler = _Records()
    librdkafka_logger().addHandler(handler)
    yield handler
    librdkafka_logger().removeHandler(handler)


def test_a_real_clients_log_reaches_python_logging_and_never_stderr(
    librdkafka_records: _Records, capfd: pytest.CaptureFixture[str]
) -> None:
    # A client id of its own, so the process-wide repeat filter has not seen this message before.
    name = f"log-probe-{uuid.uuid4().hex}"
    producer = Producer(plain_conf("127.0.0.1:1", **{"client.id": name}))  # nothing listens there
    deadline = clock.monotonic() + 60
    while not librdkafka_records.records:  # librdkafka hands its log over when the client is polled
        assert clock.monotonic() < deadline, "librdkafka logged nothing about the refused connection"
        producer.poll(0.2)

    (first, *_) = librdkafka_records.records
    assert first.name == LIBRDKAFKA_LOGGER
    assert first.levelno >= logging.WARNING  # the default level lets nothing quieter through
    assert name in first.getMessage()
    assert "127.0.0.1:1" in first.getMessage()
    assert not re.search(r"^%\d\|", capfd.readouterr().err, re.MULTILINE)
