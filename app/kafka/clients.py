"""Kafka client settings for both client stacks, from one KafkaConfig, and the two behaviours every
confluent-kafka call shares: retries of retriable errors, and librdkafka's log through Python logging.

confluent-kafka (librdkafka) serves the committer, the Admin API and producers; Spark's Java client
serves the Kafka source. Pass-through properties are handed over untouched. Errors and logs mention
the bootstrap servers but never a property value.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from app.config import KafkaConfig
from app.errors import KafkaUnavailableError
from app.kafka.local_broker import running_broker

log = logging.getLogger(__name__)

T = TypeVar("T")

# --- retries -------------------------------------------------------------------------------------

# Errors that say "ask again shortly": a coordinator moving or loading its partitions (a broker that
# started a minute ago answers NOT_COORDINATOR for a while), a leader election, a request or
# connection lost in flight. confluent-kafka marks almost none of them retriable() itself: only
# errors that reach Python as librdkafka error objects carry that flag, the others arrive as bare codes.
RETRIABLE_CODES = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.PREFERRED_LEADER_NOT_AVAILABLE,
        KafkaError.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
        KafkaError.THROTTLING_QUOTA_EXCEEDED,
        # librdkafka's local errors: the broker connection dropped or the answer did not come in time.
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
    }
)
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError a confluent-kafka exception carries, if any."""
    arg = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return arg if isinstance(arg, KafkaError) else None


def is_retriable(error: KafkaError) -> bool:
    return bool(error.retriable()) or error.code() in RETRIABLE_CODES


def raise_partition_errors(errors: Iterable[KafkaError | None]) -> None:
    """Per-partition (or per-topic) answers carry their own errors: the first one fails the whole
    call, so that retry_kafka asks again when it is retriable, instead of the caller reading a
    partition's error as 'no offset'."""
    for error in errors:
        if error is not None:
            raise KafkaException(error)


def retry_kafka(
    call: Callable[[float], T],
    what: str,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call(seconds_left)` until it answers, retrying retriable Kafka errors with exponential backoff.

    The whole exchange, retries and backoff included, stays within `timeout_s`: each attempt gets
    only the time that is left. A non-retriable error, or a retriable one still there at the
    deadline, becomes KafkaUnavailableError (exit code 3 at the CLI) naming `what` and Kafka's error.
    A future that does not resolve in the time given (concurrent.futures.TimeoutError) is a timeout.
    """
    deadline = clock() + timeout_s
    backoff = FIRST_BACKOFF_S
    attempts = 0
    telling: KafkaError | None = None  # the error to report: a timeout only if nothing said more
    while True:
        attempts += 1
        try:
            return call(max(deadline - clock(), 0.001))
        except (KafkaException, concurrent.futures.TimeoutError) as exc:
            error = kafka_error(exc)
            if error is None and isinstance(exc, concurrent.futures.TimeoutError):
                error = KafkaError(KafkaError._TIMED_OUT)
            if error is None:
                raise KafkaUnavailableError(f"{what} failed: {exc}") from exc
            if not is_retriable(error):
                raise KafkaUnavailableError(f"{what} failed: {error.name()} ({error.str()})") from exc
            if telling is None or error.code() != KafkaError._TIMED_OUT:
                telling = error
            left = deadline - clock()
            if left <= 0:
                raise KafkaUnavailableError(
                    f"{what}: Kafka did not answer within {timeout_s:.0f}s "
                    f"({attempts} attempts, last error {telling.name()}: {telling.str()})"
                ) from exc
            # DEBUG: a retry that succeeds is routine; one that does not ends in the error above.
            log.debug("%s: %s, retrying in %.1fs", what, error.name(), min(backoff, left))
            sleep(min(backoff, left))
            backoff = min(backoff * 2, MAX_BACKOFF_S)


# --- librdkafka's log ----------------------------------------------------------------------------

LIBRDKAFKA_LOGGER = "librdkafka"
_NUMBERS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Lets one message through per `interval_s`, however often it repeats in between.

    librdkafka logs every failed reconnect (hundreds a minute while a broker is down), each differing
    only in numbers (client instance, milliseconds, ports): those are ignored when comparing. After
    the interval the message shows again, so a second outage an hour later is not hidden.
    """

    def __init__(
        self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic, max_keys: int = 1024
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self.max_keys = max_keys
        self._last: OrderedDict[tuple[int, str], float] = OrderedDict()
        self._lock = threading.Lock()  # clients serve their logs from whichever thread polls them

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, _NUMBERS.sub("#", record.getMessage()))
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                return False
            self._last[key] = now
            self._last.move_to_end(key)
            while len(self._last) > self.max_keys:
                self._last.popitem(last=False)
        return True


def librdkafka_logger() -> logging.Logger:
    """The Python logger every confluent-kafka client logs to: warnings and above unless configured
    otherwise, repeats dropped. Without it librdkafka writes its own lines straight to stderr.

    Quiet unless the application configures logging: a NullHandler, so an unconfigured application
    (a job that attached the audit) does not get librdkafka's connection errors printed on its
    stderr by Python's last-resort handler; configured, the records reach its handlers."""
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    return logger


# --- clients -------------------------------------------------------------------------------------


def resolve_bootstrap(cfg: KafkaConfig, kafka_dir: Path) -> str:
    """The real address: configured servers, or the embedded broker's when set to 'local'."""
    if not cfg.is_local:
        return cfg.bootstrap_servers
    state = running_broker(kafka_dir)
    if state is None:
        raise KafkaUnavailableError(
            f"kafka.bootstrap_servers is 'local' but no embedded broker runs under {kafka_dir}; "
            "start one with 'offset-audit kafka-local start'"
        )
    return state.bootstrap_servers


# Every consumer the project creates reads bounded ranges: a micro-batch's or a replay's offsets, a
# slice of __consumer_offsets, a suspected gap. A fetch at the end of what the broker holds waits up to
# the fetch wait (Kafka's and librdkafka's default: 500 ms) for a record the reader does not want, and
# Spark's Kafka source pays that in each task: a micro-batch over 1,000 partitions of 20 records each
# took 289 s instead of about 50 s (bench.stream --partitions 1000). A short wait costs a reader that
# stops at its range's end nothing. Defaults only: the user's kafka.client, kafka.java or
# kafka.librdkafka settings win.
SPARK_SOURCE_DEFAULTS: Mapping[str, str] = {"fetch.max.wait.ms": "10"}
RANGE_READER_DEFAULTS: Mapping[str, Any] = {"fetch.wait.max.ms": 10}
# The same waiting on our side: confluent-kafka's Consumer.consume(n, timeout) returns only when it
# holds n messages or the timeout has passed, so a range reader's last, partial batch waited out the
# whole timeout (1 s) after its records and end-of-partition events had arrived. Range readers call
# it with this timeout, in a loop that has its own deadline.
CONSUME_WAIT_S = 0.1


def librdkafka_conf(
    cfg: KafkaConfig, bootstrap: str, defaults: Mapping[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """confluent-kafka settings: ours, then `defaults`, then the user's (kafka.client, then
    kafka.librdkafka), then `extra`, which the caller's logic depends on."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": int(cfg.request_timeout_s * 1000),
        # Through Python logging (served when the client is polled), never raw to stderr.
        "logger": librdkafka_logger(),
        **(defaults or {}),
    }
    conf.update(cfg.client)
    conf.update(cfg.librdkafka)
    conf.update(extra)
    return conf


def range_reader_conf(
    cfg: KafkaConfig,
    bootstrap: str,
    group_id: str,
    offset_reset: str,
    defaults: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """librdkafka settings for a consumer that reads fixed offset ranges with assign(): committed
    records only, told when it reaches a partition's end, never committing, not waiting at the end
    (RANGE_READER_DEFAULTS, then `defaults`; the user's settings win over both). librdkafka wants a
    group id; with assign() and no commit it never joins the group or writes to it."""
    return librdkafka_conf(
        cfg,
        bootstrap,
        {**RANGE_READER_DEFAULTS, **(defaults or {})},
        **{
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": offset_reset,
            **extra,
        },
    )


def plain_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """librdkafka settings for a client that needs only an address (the demo's and tests' own
    clients), with the same logging as the application's."""
    return {"bootstrap.servers": bootstrap, "logger": librdkafka_logger(), **extra}


def spark_kafka_options(cfg: KafkaConfig, bootstrap: str) -> dict[str, str]:
    """Options for spark.read/readStream.format('kafka'): Java client properties get the 'kafka.' prefix.
    SPARK_SOURCE_DEFAULTS apply unless kafka.client or kafka.java sets them."""
    props = {"bootstrap.servers": bootstrap, **SPARK_SOURCE_DEFAULTS, **cfg.client, **cfg.java}
    return {f"kafka.{k}": v for k, v in props.items()}


def admin_client(cfg: KafkaConfig, bootstrap: str) -> AdminClient:
    return AdminClient(librdkafka_conf(cfg, bootstrap))


def check_reachable(cfg: KafkaConfig, bootstrap: str, timeout_s: float | None = None) -> int:
    """Number of brokers answering, or KafkaUnavailableError (exit code 3 at the CLI) within about
    `timeout_s` (default kafka.request_timeout_s). Commands call it before paying for Spark."""
    timeout = timeout_s if timeout_s is not None else cfg.request_timeout_s
    admin = admin_client(cfg, bootstrap)
    md = retry_kafka(
        lambda left: admin.list_topics(timeout=left), f"metadata request to {bootstrap}", timeout
    )
    return len(md.brokers)
