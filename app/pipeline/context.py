"""The audit context: what every step of one process run works with, made once per run.

A command, a night or a watch opens one context: the config, the tables resolved once
(`AuditTables`), the storage settings they are reached with, the Spark session (started when a
step first needs it, so a command that fails on the broker fails before paying for Spark), the
broker and its one policy for being away (`Broker`), and the clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.config import AppConfig, KafkaConfig, ReconcileConfig
from app.errors import InfrastructureError, KafkaUnavailableError
from app.kafka.gaps import GapConfirmer, kafka_gap_confirmer, unavailable_confirmer
from app.kafka.times import KafkaTimes, SourceTimes, UnavailableTimes
from app.storage.backend import StorageSettings
from app.storage.handles import AuditTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def wall_clock() -> datetime:
    return datetime.now(UTC)


class Broker:
    """The one policy for a broker that is away, for every step that talks to it.

    A step asks for the broker when it needs it, never before, and asks again each time (an
    embedded broker restarted between two watch cycles has another address). What cannot be done
    without it fails with `KafkaUnavailableError`, an infrastructure error (exit 3; a failed
    night's step; a failed watch cycle): `ingest-offsets`, and a reconcile with suspected gaps to
    confirm. What the next run does instead is left, with a warning: the completeness windows,
    which resume from their own table. A broker that cannot even be located (an embedded broker
    not running) is treated like one that does not answer: the same steps fail, at the same point.
    """

    def __init__(self, kafka: KafkaConfig, locate: Callable[[], str]) -> None:
        self.kafka = kafka
        self.locate = locate  # the bootstrap address, or KafkaUnavailableError

    def reachable(self) -> str:
        """The address of a broker that answers (within kafka.request_timeout_s), for a step that
        cannot start without one; else KafkaUnavailableError."""
        from app.kafka.clients import check_reachable

        bootstrap = self.locate()
        check_reachable(self.kafka, bootstrap)
        return bootstrap

    def gap_confirmer(self, reconcile: ReconcileConfig) -> GapConfirmer:
        """Reads suspected gaps back from the source; fails the run only when there are gaps."""
        try:
            bootstrap = self.locate()
        except KafkaUnavailableError as exc:
            return unavailable_confirmer(exc)
        return kafka_gap_confirmer(
            self.kafka,
            bootstrap,
            max_records=reconcile.confirm_max_records,
            timeout_s=reconcile.confirm_timeout_s,
        )

    def source_times(self, reconcile: ReconcileConfig) -> SourceTimes:
        """The source's offsets by time; a broker away fails only the windows that ask it, which
        reconcile then leaves for the next run."""
        try:
            bootstrap = self.locate()
        except KafkaUnavailableError as exc:
            return UnavailableTimes(exc)
        return KafkaTimes(self.kafka, bootstrap, reconcile.confirm_timeout_s)


class AuditContext:
    """One process run's config, tables, storage, Spark session, broker and clock."""

    def __init__(
        self,
        cfg: AppConfig,
        tables: AuditTables,
        broker: Broker,
        session: Callable[[], SparkSession] | None = None,
        clock: Clock = wall_clock,
    ) -> None:
        self.cfg = cfg
        self.broker = broker
        self.clock = clock
        self._tables = tables
        self._session = session
        self._spark: SparkSession | None = None

    @classmethod
    def create(
        cls,
        cfg: AppConfig,
        storage: StorageSettings,
        *,
        bootstrap: Callable[[], str],
        session: Callable[[], SparkSession] | None = None,
        clock: Clock = wall_clock,
        sink_override: str | None = None,
    ) -> AuditContext:
        """The tables of `tables:` (with ``--sink``, ``sink_override``) reached with ``storage``;
        ``session`` starts (or returns) the Spark session a step asks for."""
        tables = AuditTables.from_config(cfg, storage, sink_override)
        return cls(cfg, tables, Broker(cfg.kafka, bootstrap), session, clock)

    @classmethod
    def for_session(
        cls, cfg: AppConfig, spark: SparkSession, bootstrap: Callable[[], str], clock: Clock = wall_clock
    ) -> AuditContext:
        """The context of a run in a session already started (the demo's night, a test's)."""
        return cls.create(cfg, spark, bootstrap=bootstrap, session=lambda: spark, clock=clock)

    @property
    def tables(self) -> AuditTables:
        return self._tables

    @property
    def storage(self) -> StorageSettings:
        return self._tables.storage

    @property
    def spark(self) -> SparkSession:
        return self.start_spark()

    def start_spark(self) -> SparkSession:
        """The session, started at the first step that needs it (or by a caller that wants it
        before its first step); the tables are reached through it from then on (its Hadoop
        configuration holds the cluster's own storage settings)."""
        if self._spark is None:
            if self._session is None:
                raise InfrastructureError("this run has no Spark session to give a step that needs one")
            self._spark = self._session()
            self._tables = self._tables.bound(self._spark)
        return self._spark

    def now(self) -> datetime:
        return self.clock()


def open_context(cfg: AppConfig, sink_override: str | None = None) -> AuditContext:
    """The context of a command, a night or a watch: the tables reached with the storage settings
    of driver-side reads (a running session's, else the config's: no JVM where none runs), the
    session started when a step first needs one, the broker located when a step first asks."""
    from app.runtime.session import kafka_bootstrap, spark_session, table_storage

    return AuditContext.create(
        cfg,
        table_storage(cfg),
        bootstrap=lambda: kafka_bootstrap(cfg),
        session=lambda: spark_session(cfg),
        sink_override=sink_override,
    )
