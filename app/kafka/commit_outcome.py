"""What one group commit returned: per-partition acknowledgements and typed errors, independent of
the Kafka client that sent it (the committer takes any ``CommitFn``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from app.contracts.offsets import TopicPartitionKey
from app.contracts.vocabulary import DETAIL_ERROR, DETAIL_MESSAGE, DETAIL_RETRIABLE
from app.errors import OffsetAuditError


@dataclass(frozen=True)
class CommitError:
    """A failed commit as Kafka reported it: error name (e.g. NOT_COORDINATOR), retriable flag."""

    error: str
    retriable: bool
    message: str = ""

    def to_detail(self) -> dict[str, object]:
        return {DETAIL_ERROR: self.error, DETAIL_RETRIABLE: self.retriable, DETAIL_MESSAGE: self.message}


class CommitFailedError(OffsetAuditError):
    """Raised by a ``commit_fn`` whose whole request failed; carries the typed error.

    Defined beside ``CommitError``, not in ``app.errors``: the error family imports nothing of the
    application, and this one's payload is the committer's own type."""

    def __init__(self, error: CommitError) -> None:
        super().__init__(f"offset commit failed: {error.error} (retriable={error.retriable}) {error.message}")
        self.error = error


class _KafkaErrorLike(Protocol):
    """The part of ``confluent_kafka.KafkaError`` we read; a Protocol keeps this module broker-free."""

    def name(self) -> str: ...

    def retriable(self) -> bool: ...

    def str(self) -> str: ...


def commit_error_from_kafka(kafka_error: _KafkaErrorLike, retriable: bool | None = None) -> CommitError:
    """Translate a confluent-kafka ``KafkaError`` (whole request or one partition's) to a CommitError.

    ``retriable`` overrides the error's own flag, which confluent-kafka leaves off for most errors
    that arrive as bare codes (NOT_COORDINATOR among them); the Kafka side passes its classification.
    """
    flag = kafka_error.retriable() if retriable is None else retriable
    return CommitError(error=kafka_error.name(), retriable=flag, message=kafka_error.str())


@dataclass(frozen=True)
class CommitResult:
    """What one synchronous commit call returned.

    ``acknowledged`` maps each partition Kafka confirmed to the offset it stored; ``errors`` holds
    per-partition failures; ``error`` is a failure of the whole request and applies to every
    partition that is in neither map. A partition sent but absent from all three is recorded as
    outcome-unknown rather than assumed committed.
    """

    acknowledged: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    errors: Mapping[TopicPartitionKey, CommitError] = field(default_factory=dict)
    error: CommitError | None = None

    @classmethod
    def ok(cls, offsets: Mapping[TopicPartitionKey, int]) -> CommitResult:
        return cls(acknowledged=dict(offsets))

    @classmethod
    def failed(cls, error: CommitError) -> CommitResult:
        return cls(error=error)


CommitFn = Callable[[Mapping[TopicPartitionKey, int]], CommitResult]
