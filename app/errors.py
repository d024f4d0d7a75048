"""One exception family for the whole application.

The CLI maps the families to the exit codes of the scheduler contract (see README):
ConfigError, UsageError and the rest of the family -> 2, InfrastructureError -> 3. Exceptions from
outside the family are classified by ``error_kind``: those of Spark, py4j, Kafka clients and
storage are infrastructure (3); anything else is a bug, reported as an internal error (3 as well),
so no failure ever exits 1, which means "findings".
"""

from __future__ import annotations

from collections.abc import Sequence

# Imports nothing of the application: every module may raise these, so this one sits below them all.


class OffsetAuditError(Exception):
    """Base of every error this application raises on purpose."""


class ConfigError(OffsetAuditError):
    """The configuration is missing, malformed or inconsistent. Exit code 2."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config error at '{key}': {message}")
        self.key = key


class UsageError(OffsetAuditError):
    """The command line is wrong. Exit code 2."""


class InfrastructureError(OffsetAuditError):
    """Kafka, storage, Spark or the JVM toolchain is unavailable. Exit code 3."""


class KafkaUnavailableError(InfrastructureError):
    """The Kafka cluster could not be reached or did not answer in time."""


class JvmSetupError(InfrastructureError):
    """Maven, Java or a required jar is missing."""


class SchemaMismatchError(OffsetAuditError):
    """A table does not carry the columns its contract requires."""


class UnknownEngineError(OffsetAuditError, ValueError):
    """An engine name outside the ledger contract's vocabulary."""

    def __init__(self, engine: str, expected: Sequence[str]) -> None:
        super().__init__(f"unknown engine {engine!r}; expected one of {list(expected)}")
        self.engine = engine


class InvalidOffsetError(OffsetAuditError, ValueError):
    """A negative offset that is not a sentinel of its engine: corrupt input, never guessed at."""


class InvalidLedgerEventError(OffsetAuditError, ValueError):
    """A ledger event that would violate the ledger contract if it were written."""


class CheckpointFormatError(OffsetAuditError):
    """A Spark checkpoint file does not look like Spark wrote it."""


class FlinkStateError(OffsetAuditError):
    """A Flink checkpoint or savepoint the decoder does not understand: never guessed at.

    The message names the file and what in it was not understood (an unknown format version, an
    unknown serializer, a truncated or corrupt structure), so no offsets are taken from it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class FlinkCheckpointGoneError(FlinkStateError):
    """A checkpoint file that is not there: Flink deleted it (retention) or it never was written."""


class FlinkRestError(InfrastructureError):
    """A Flink JobManager's REST API could not be reached or did not answer as documented. Exit code 3."""


class AttachError(OffsetAuditError):
    """A streaming query the audit cannot attach to (its checkpoint cannot be found)."""


class CommitterStateError(OffsetAuditError, RuntimeError):
    """The committer was used in a way its state does not allow (closed, or driven twice)."""


class BrowserUnavailableError(InfrastructureError):
    """Chromium is not installed or did not produce what was asked."""


# What a failure outside this family means for the scheduler: these come from the services the
# application stands on (the JVM bridge, Spark, Kafka, table storage), so they are infrastructure
# errors (exit 3), never "findings" (exit 1, what an unhandled exception would give).
_INFRASTRUCTURE_MODULES = ("py4j", "pyspark", "confluent_kafka", "deltalake", "duckdb", "pyarrow", "botocore")

# Longest error text shown in one line (a Java stack trace is thousands of lines).
_ERROR_TEXT_MAX = 500


def _storage_errors() -> tuple[type[BaseException], ...]:
    # delta-rs defines its errors in a native module named '_internal': matched by class, not name.
    try:
        from deltalake.exceptions import DeltaError
    except ImportError:  # pragma: no cover - deltalake is a dependency; kept importable without it
        return ()
    return (DeltaError,)


def is_infrastructure(exc: BaseException) -> bool:
    """True for failures of Spark, Kafka, storage or the JVM bridge, ours or theirs."""
    if isinstance(exc, (InfrastructureError, OSError, TimeoutError, ConnectionError, *_storage_errors())):
        return True
    return any(cls.__module__.split(".")[0] in _INFRASTRUCTURE_MODULES for cls in type(exc).__mro__)


def describe_error(exc: BaseException) -> str:
    """One line for people and logs: the exception's first line (a Java exception's message, not
    its stack trace), its type when that says more, at most 500 characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not isinstance(exc, OffsetAuditError):
        text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= _ERROR_TEXT_MAX else text[: _ERROR_TEXT_MAX - 3] + "..."


def error_kind(exc: BaseException) -> str:
    """'usage' (exit 2), 'infrastructure' (exit 3) or 'internal' (a bug; exit 3 as well, so a
    scheduler never reads it as findings)."""
    if is_infrastructure(exc):
        return "infrastructure"
    return "usage" if isinstance(exc, OffsetAuditError) else "internal"
