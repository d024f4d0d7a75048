"""One exception family for the whole application.

The CLI maps the families to the exit codes of the scheduler contract (see README):
ConfigError -> 2, InfrastructureError -> 3. Everything else under OffsetAuditError is a bug
or a data problem that the caller reports with its message.
"""

from __future__ import annotations


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
