"""Configuration: conf/base.yaml layered with conf/<env>.yaml, ${ENV} substitution, --set overrides,
validated once into frozen dataclasses. Nothing else in the application reads YAML or env vars.

Errors name the offending key ('kafka.request_timeout_s: expected a number, got 'soon'').
Kafka client properties pass through untouched; every printed or logged form of the config goes
through `redact`, so secrets never leave the process in clear.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from app.contracts.vocabulary import (
    RESET_STRATEGIES,
    RESTORE_EARLIEST,
    RESTORE_GROUP,
    RESTORE_TIMESTAMP,
    SINK_COORDINATES,
    SINK_MODES,
    STARTUP_MODES,
)
from app.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF_DIR = REPO_ROOT / "conf"
LOCAL_BOOTSTRAP = "local"  # sentinel: the embedded broker managed by `offset-audit kafka-local`

_SECRET_KEY = re.compile(
    r"(password|secret|token|jaas|credential|api[._-]?key|access[._-]?key|account\.key|private|key\.pem"
    r"|keystore|webhook)",
    re.I,
)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
REDACTED = "***"
_URI_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@/\s]+@")


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    app_name: str = "offset-audit"
    shuffle_partitions: int = 4
    driver_memory: str = "4g"
    # 'auto': leave the session alone when spark-submit already configured it (a real cluster),
    # otherwise build a local one. 'local': always local. 'cluster': never touch master or jars.
    mode: str = "auto"
    conf: dict[str, str] = field(default_factory=dict)
    # JVM options for a local session's driver, after the application's own (UTC, log levels), which
    # `spark.conf`'s spark.driver.extraJavaOptions would replace. Never applied under spark-submit.
    driver_java_options: str = ""

    def __post_init__(self) -> None:
        if self.shuffle_partitions < 1:
            raise ConfigError("spark.shuffle_partitions", "must be at least 1")
        if self.mode not in ("auto", "local", "cluster"):
            raise ConfigError("spark.mode", f"must be auto, local or cluster, got '{self.mode}'")


@dataclass(frozen=True)
class LocalKafkaConfig:
    offsets_partitions: int = 5
    start_timeout_s: float = 90.0
    heap: str = "512m"

    def __post_init__(self) -> None:
        if not 1 <= self.offsets_partitions <= 1000:
            raise ConfigError("local_kafka.offsets_partitions", "must be between 1 and 1000")
        if self.start_timeout_s <= 0:
            raise ConfigError("local_kafka.start_timeout_s", "must be positive")


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = LOCAL_BOOTSTRAP
    request_timeout_s: float = 30.0
    # Properties for every client (Spark's Java client and confluent-kafka's librdkafka) ...
    client: dict[str, str] = field(default_factory=dict, repr=False)
    # ... and those only one of the two understands (e.g. sasl.jaas.config vs sasl.username).
    java: dict[str, str] = field(default_factory=dict, repr=False)
    librdkafka: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError("kafka.bootstrap_servers", "must not be empty")
        if self.request_timeout_s <= 0:
            raise ConfigError("kafka.request_timeout_s", "must be positive")
        for section, props in (("client", self.client), ("java", self.java), ("librdkafka", self.librdkafka)):
            if "bootstrap.servers" in props:
                raise ConfigError(f"kafka.{section}.bootstrap.servers", "set kafka.bootstrap_servers instead")

    @property
    def is_local(self) -> bool:
        return self.bootstrap_servers == LOCAL_BOOTSTRAP

    def __repr__(self) -> str:
        return f"KafkaConfig({redact(dataclasses.asdict(self))})"


@dataclass(frozen=True)
class StorageConfig:
    """Object storage under the tables (s3a://, ...): Hadoop filesystem properties, given to Spark's
    Hadoop configuration on the driver, from where Spark ships them to the executors' tasks and
    delta-rs takes the fs.s3a.* ones for the driver-side tables (translated by `storage.backend`).
    Credentials come as ${ENV}; every key that looks like a secret is redacted wherever config is
    printed."""

    options: dict[str, str] = field(default_factory=dict, repr=False)  # e.g. fs.s3a.endpoint: https://...

    def __post_init__(self) -> None:
        for key in self.options:
            if not key.startswith("fs."):
                raise ConfigError(f"storage.options.{key}", "expected a Hadoop filesystem property (fs.*)")

    def __repr__(self) -> str:
        return f"StorageConfig({redact(dataclasses.asdict(self))})"


@dataclass(frozen=True)
class PathsConfig:
    # A string, not a Path: on a cluster it is a URI (s3a://, abfss://) that Path would mangle.
    data_dir: str = "./data"
    cache_dir: Path = Path("~/.cache/offset-audit")

    def __post_init__(self) -> None:
        if not self.data_dir.strip():
            raise ConfigError("paths.data_dir", "must not be empty")

    def under(self, *parts: str) -> str:
        return "/".join([self.data_dir.rstrip("/"), *parts])

    @property
    def kafka_dir(self) -> Path:
        """Storage of the embedded broker: always a local directory."""
        return Path(self.data_dir) / "kafka"


@dataclass(frozen=True)
class TablesConfig:
    """Where each table lives: one key per table, read by every command that reads or writes it
    (`storage.tables` resolves them). "" is <data_dir>/tables/<name>; a bare name lives under
    <data_dir>/tables; anything with a slash is a path or URI as it stands."""

    sink: str = ""
    ledger: str = ""
    group_commits: str = ""
    group_events: str = ""
    decode_errors: str = ""
    ingest_positions: str = ""
    findings: str = ""
    partition_summary: str = ""
    restarts: str = ""
    incidents: str = ""
    audit_runs: str = ""  # one row per successful reconcile run: the default start of the next window
    validation_results: str = ""
    alert_state: str = ""  # what `watch` last alerted per incident: a restarted watch does not repeat it
    completeness: str = ""  # per job, topic, partition and event-time window: expected, landed, lost
    sink_by_job: dict[str, str] = field(default_factory=dict)  # job name -> its sink, wins over sink

    def __post_init__(self) -> None:
        for job, value in self.sink_by_job.items():
            if not value.strip():
                raise ConfigError(f"tables.sink_by_job.{job}", "must name a table")


# How a table is addressed through a catalog of `iceberg.catalogs`: iceberg:<catalog>.<namespace>.<table>.
ICEBERG_PREFIX: Final = "iceberg:"
ICEBERG_CATALOG_TYPES: Final = ("hadoop", "sql", "rest")


def iceberg_address(value: str) -> tuple[str, str, str] | None:
    """(catalog, namespace, table) of an ``iceberg:<catalog>.<namespace>.<table>`` address, None for
    any other location; the namespace may hold dots (a nested one), the catalog and table cannot."""
    if not value.startswith(ICEBERG_PREFIX):
        return None
    parts = value.removeprefix(ICEBERG_PREFIX).split(".")
    if len(parts) < 3 or not all(parts):
        return None
    return parts[0], ".".join(parts[1:-1]), parts[-1]


@dataclass(frozen=True)
class IcebergCatalogConfig:
    """One Iceberg catalog, as Spark's ``SparkCatalog`` and pyiceberg both take it: ``hadoop`` (a
    warehouse directory, tables at <warehouse>/<namespace>/<table>), ``sql`` (a JDBC/SQLAlchemy
    ``uri``, e.g. sqlite:////path/catalog.db, and a ``warehouse``) or ``rest`` (a ``uri``).
    ``properties``: further catalog properties for both (credentials as ${ENV}: never printed)."""

    type: str = ""
    warehouse: str = ""
    uri: str = ""
    properties: dict[str, str] = field(default_factory=dict, repr=False)

    def problem(self) -> tuple[str, str] | None:
        """(sub-key, what is wrong), or None when the catalog is complete."""
        if self.type not in ICEBERG_CATALOG_TYPES:
            return "type", f"must be one of {', '.join(ICEBERG_CATALOG_TYPES)}, got {self.type!r}"
        if self.type in ("hadoop", "sql") and not self.warehouse.strip():
            return "warehouse", f"a {self.type} catalog needs its warehouse"
        if self.type in ("sql", "rest") and not self.uri.strip():
            return "uri", f"a {self.type} catalog needs its uri"
        return None

    def __repr__(self) -> str:
        return f"IcebergCatalogConfig({redact(dataclasses.asdict(self))})"


@dataclass(frozen=True)
class IcebergConfig:
    """Iceberg catalogs, by the name a sink address (``iceberg:<catalog>.<ns>.<table>``) and a
    user's Spark job (``spark.sql.catalog.<name>``) both use."""

    catalogs: dict[str, IcebergCatalogConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, catalog in self.catalogs.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ConfigError(f"iceberg.catalogs.{name}", "a catalog name is letters, digits and _")
            if (problem := catalog.problem()) is not None:
                raise ConfigError(f"iceberg.catalogs.{name}.{problem[0]}", problem[1])


# Keys that named a table before `tables:` held them all: each now fails at load, naming its successor.
RETIRED_TABLE_KEYS: dict[str, str] = {
    "stream.sink_table": "tables.sink (tables.sink_by_job.<job> for one job)",
    "stream.ledger_table": "tables.ledger",
    "reconcile.sink_table": "tables.sink",
    "reconcile.sink_tables": "tables.sink_by_job",
    "reconcile.ledger_table": "tables.ledger",
    "reconcile.group_commits_table": "tables.group_commits",
    "reconcile.findings_table": "tables.findings",
    "reconcile.partition_summary_table": "tables.partition_summary",
    "reconcile.restarts_table": "tables.restarts",
    "reconcile.incidents_table": "tables.incidents",
    "reconcile.runs_table": "tables.audit_runs",
    "checks.results_table": "tables.validation_results",
}


@dataclass(frozen=True)
class StreamConfig:
    """The reference streaming job (offset-audit stream)."""

    job_name: str = "orders-audit"
    topics: list[str] = field(default_factory=lambda: ["orders"])
    group_id: str = "offset-audit-orders"  # the group the job commits to; it never joins it
    checkpoint_dir: str = ""  # default: <data_dir>/checkpoints/<job_name>
    # Where to start when the checkpoint holds no state (restored state always wins, as in Flink).
    startup_mode: str = RESTORE_GROUP  # one of STARTUP_MODES
    reset_strategy: str = RESTORE_EARLIEST  # for partitions the startup mode has no offset for
    startup_timestamp_ms: int = 0
    specific_offsets: dict[str, str] = field(default_factory=dict)  # "topic:partition" -> offset
    trigger_interval: str = "2 seconds"
    max_offsets_per_trigger: int = 0  # 0: no limit
    isolation_level: str = "read_committed"
    # Off by default: a reference job that stops on retention loss would hide the very gap we audit.
    fail_on_data_loss: bool = False
    commit_offsets: bool = True
    max_pending_checkpoints: int = 100
    commit_close_timeout_s: float = 30.0
    # A stop waits this long for the micro-batch in progress to finish before interrupting it.
    stop_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.topics:
            raise ConfigError("stream.topics", "needs at least one topic")
        if self.startup_mode not in STARTUP_MODES:
            raise ConfigError("stream.startup_mode", f"must be one of {', '.join(STARTUP_MODES)}")
        if self.reset_strategy not in RESET_STRATEGIES:
            raise ConfigError("stream.reset_strategy", f"must be {' or '.join(RESET_STRATEGIES)}")
        if self.isolation_level not in ("read_committed", "read_uncommitted"):
            raise ConfigError("stream.isolation_level", "must be read_committed or read_uncommitted")
        if self.max_pending_checkpoints < 1:
            raise ConfigError("stream.max_pending_checkpoints", "must be at least 1")
        if self.max_offsets_per_trigger < 0:
            raise ConfigError("stream.max_offsets_per_trigger", "must be 0 (no limit) or positive")
        if self.stop_timeout_s <= 0:
            raise ConfigError("stream.stop_timeout_s", "must be positive")
        if self.startup_mode == RESTORE_TIMESTAMP and self.startup_timestamp_ms <= 0:
            raise ConfigError(
                "stream.startup_timestamp_ms", "required (epoch ms) with startup_mode timestamp"
            )
        for key, value in self.specific_offsets.items():
            topic, _, partition = key.rpartition(":")
            if not topic or not partition.isdigit() or not value.lstrip("-").isdigit():
                raise ConfigError(f"stream.specific_offsets.{key}", "expected 'topic:partition': offset")

    def specific(self) -> dict[tuple[str, int], int]:
        out = {}
        for key, value in self.specific_offsets.items():
            topic, _, partition = key.rpartition(":")
            out[(topic, int(partition))] = int(value)
        return out


INGEST_MODES = ("topic", "snapshot")
# Where ingest-offsets reads and decodes __consumer_offsets: 'driver' (one Kafka consumer and delta-rs in
# the driver process), 'spark' (Spark's Kafka source, decoded on the executors), 'auto' (driver when
# Spark runs local, where the executors are the driver process anyway; spark on a cluster).
INGEST_DECODE_ON = ("auto", "driver", "spark")


@dataclass(frozen=True)
class IngestConfig:
    """`ingest-offsets`: which groups to audit and how to read their commits."""

    # Audited consumer groups; empty means every group (and every __consumer_offsets partition).
    groups: list[str] = field(default_factory=list)
    # 'topic' decodes the internal topic (full history); 'snapshot' asks the Admin API for the current
    # committed offsets only, for clusters that forbid reading __consumer_offsets.
    mode: str = "topic"
    offsets_topic: str = "__consumer_offsets"
    # Caps how far one run reads per partition (0 = to the end), so a first run over years of history
    # can be split into bounded runs; positions make the next run continue where this one stopped.
    max_records_per_partition: int = 0
    # Spark tasks for the read; 0 = one per selected partition. More splits a hot partition's range.
    min_partitions: int = 0
    decode_on: str = "auto"  # INGEST_DECODE_ON; see app/routes.py decode_route

    def __post_init__(self) -> None:
        if self.decode_on not in INGEST_DECODE_ON:
            raise ConfigError("ingest.decode_on", f"must be auto, driver or spark, got '{self.decode_on}'")
        if self.mode not in INGEST_MODES:
            raise ConfigError("ingest.mode", f"must be topic or snapshot, got '{self.mode}'")
        if not self.offsets_topic.strip():
            raise ConfigError("ingest.offsets_topic", "must not be empty")
        if any(not g for g in self.groups):
            raise ConfigError("ingest.groups", "group ids must not be empty")
        if self.max_records_per_partition < 0:
            raise ConfigError("ingest.max_records_per_partition", "must be 0 (no cap) or positive")
        if self.min_partitions < 0:
            raise ConfigError("ingest.min_partitions", "must be 0 (one task per partition) or positive")


@dataclass(frozen=True)
class ReconcileConfig:
    """What `reconcile` and `forensics` audit and how strictly (CONTRACTS.md sections 4 and 5).

    The tables they read and write are `tables.*`. The sink's column names are configurable because
    any Delta table that carries source coordinates can be audited.
    """

    sink_topic_column: str = "kafka_topic"
    sink_partition_column: str = "kafka_partition"
    sink_offset_column: str = "kafka_offset"
    sink_checkpoint_column: str = "_checkpoint_id"  # optional in the sink: evidence only
    sink_run_column: str = "_run_id"  # optional in the sink: evidence only
    sink_timestamp_column: str = "kafka_timestamp"  # optional in the sink: completeness latencies
    jobs: list[str] = field(default_factory=list)  # empty: every job in the ledger window
    groups: list[str] = field(default_factory=list)  # empty: every group the audited jobs commit to
    commit_match_window_s: float = 300.0
    clock_skew_s: float = 5.0
    baseline_lookback_days: int = 7
    confirm_gaps: bool = True
    confirm_max_records: int = 10000
    confirm_timeout_s: float = 30.0
    # A run that wrote nothing for this long before the window end, never stopped and was not
    # followed by another run has died (UNCLEAN_STOP): an idle live job writes no events either, so
    # this is a silence long enough that nobody would call the job healthy.
    run_silence_s: float = 3600.0
    # How a job's sink is judged (CONTRACTS.md section 4): every job's default, and per job.
    sink_mode: str = SINK_COORDINATES
    sink_mode_by_job: dict[str, str] = field(default_factory=dict)
    # delta_batches: the txn app id a job's foreachBatch writes with; iceberg_snapshots: the query id
    # its foreachBatch writes as snapshot-property.spark.sql.streaming.queryId; without one, the
    # query's id (what Spark's Delta and Iceberg sinks write, and an attached run's RUN_STARTED names).
    sink_app_id_by_job: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        modes = {"reconcile.sink_mode": self.sink_mode}
        modes.update({f"reconcile.sink_mode_by_job.{job}": m for job, m in self.sink_mode_by_job.items()})
        for key, mode in modes.items():
            if mode not in SINK_MODES:
                raise ConfigError(key, f"{mode!r} is no sink mode; expected one of {', '.join(SINK_MODES)}")
        for job, app_id in self.sink_app_id_by_job.items():
            if not app_id.strip():
                raise ConfigError(f"reconcile.sink_app_id_by_job.{job}", "must name a txn app id")
        if self.run_silence_s <= 0:
            raise ConfigError("reconcile.run_silence_s", "must be positive")
        if self.commit_match_window_s <= 0:
            raise ConfigError("reconcile.commit_match_window_s", "must be positive")
        if self.clock_skew_s < 0:
            raise ConfigError("reconcile.clock_skew_s", "must not be negative")
        if self.baseline_lookback_days < 0:
            raise ConfigError("reconcile.baseline_lookback_days", "must not be negative")
        if self.confirm_max_records < 1:
            raise ConfigError("reconcile.confirm_max_records", "must be at least 1")
        if self.confirm_timeout_s <= 0:
            raise ConfigError("reconcile.confirm_timeout_s", "must be positive")
        for key in ("sink_topic_column", "sink_partition_column", "sink_offset_column"):
            if not str(getattr(self, key)).strip():
                raise ConfigError(f"reconcile.{key}", "must not be empty")

    def sink_mode_for(self, job: str) -> str:
        return self.sink_mode_by_job.get(job, self.sink_mode)


@dataclass(frozen=True)
class ChecksConfig:
    """`check`: thresholds of the Great Expectations suites and where their results go."""

    # Confirmed GAP findings (real data loss) tolerated in the latest reconcile run.
    max_confirmed_gaps: int = 0
    # Commit lag per partition in the latest partition_summary; null disables the expectation.
    max_commit_lag_offsets: int | None = 10000
    max_commit_lag_seconds: int | None = 900
    # A local directory: Great Expectations writes Data Docs through the local filesystem only.
    data_docs_dir: str = ""  # default <data_dir>/data_docs

    def __post_init__(self) -> None:
        if self.max_confirmed_gaps < 0:
            raise ConfigError("checks.max_confirmed_gaps", "must not be negative")
        for key in ("max_commit_lag_offsets", "max_commit_lag_seconds"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ConfigError(f"checks.{key}", "must not be negative (null disables it)")


@dataclass(frozen=True)
class ReportConfig:
    """`report`: the static HTML dashboard."""

    output: str = ""  # default <data_dir>/report/index.html (a local file)
    title: str = "Offset audit"
    max_findings: int = 5000  # rows in the findings table, most severe and newest first
    # The completeness heatmap, the latency line and the window gauges read the windows that start
    # in the last this many hours only, so their cost does not grow with the table's history.
    window_hours: int = 24

    def __post_init__(self) -> None:
        if self.max_findings < 1:
            raise ConfigError("report.max_findings", "must be at least 1")
        if self.window_hours < 1:
            raise ConfigError("report.window_hours", "must be at least 1")


@dataclass(frozen=True)
class AlertsConfig:
    """What `nightly` tells monitoring when it ends: metrics in Prometheus' text format, to a file
    for node_exporter's textfile collector and/or a Pushgateway, and the JSON summary to a webhook.
    Empty values turn each off."""

    textfile: str = ""  # e.g. /var/lib/node_exporter/textfile/offset_audit.prom
    pushgateway_url: str = ""  # e.g. http://pushgateway:9091
    pushgateway_job: str = "offset-audit"
    webhook_url: str = ""  # receives a POST of the nightly JSON summary (treated as a secret)
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ConfigError("alerts.timeout_s", "must be positive")
        for key in ("pushgateway_url", "webhook_url"):
            value = getattr(self, key)
            if value and not value.startswith(("http://", "https://")):
                raise ConfigError(f"alerts.{key}", "must be an http:// or https:// URL")


@dataclass(frozen=True)
class FlinkJobConfig:
    """One Flink job `watch` follows, as `flink-watch` does (README "Audit a Flink job"): its JobManager's
    REST address, the Flink job by id or by name, the job name its ledger events carry, its group."""

    rest: str = ""  # http://jobmanager:8081
    job: str = ""  # the job name of its ledger events (as reconcile.jobs names it)
    job_id: str | None = None  # follow this Flink job id until it ends ...
    job_name: str | None = None  # ... or the newest Flink job of this name, and each resubmission
    group_id: str | None = None  # the group its Kafka source commits to
    poll_s: float = 1.0  # seconds between two polls: well inside checkpoint interval x retained
    starting_offsets: str | None = None  # where its sources start without state (a STARTUP_MODES word)
    starting_offsets_key: str | None = None  # the job parameter naming that mode; wins over it


@dataclass(frozen=True)
class WatchConfig:
    """What `watch` follows besides the ledger its jobs write: Flink jobs, each brought into the ledger
    by a sidecar thread of the watch process (`app.watch.flink`)."""

    flink_jobs: list[FlinkJobConfig] = field(default_factory=list)

    def __post_init__(self) -> None:
        names: set[str] = set()
        for i, job in enumerate(self.flink_jobs):
            where = f"watch.flink_jobs[{i}]"
            if not job.rest.startswith(("http://", "https://")):
                raise ConfigError(f"{where}.rest", f"must be an http:// or https:// URL, got {job.rest!r}")
            if not job.job.strip():
                raise ConfigError(f"{where}.job", "required: the job name its ledger events carry")
            if (job.job_id is None) == (job.job_name is None):
                raise ConfigError(f"{where}.job_id", "set job_id or job_name (exactly one of them)")
            if not job.poll_s > 0:
                raise ConfigError(
                    f"{where}.poll_s", f"must be a positive number of seconds, got {job.poll_s}"
                )
            if job.starting_offsets is not None and job.starting_offsets not in STARTUP_MODES:
                raise ConfigError(
                    f"{where}.starting_offsets",
                    f"must be one of {', '.join(STARTUP_MODES)}, got {job.starting_offsets!r}",
                )
            if job.job in names:
                raise ConfigError(f"{where}.job", f"{job.job!r} is followed twice")
            names.add(job.job)


@dataclass(frozen=True)
class RetentionConfig:
    """Days each table we write keeps its rows (`maintain`), by the table's own time column; 0 keeps
    them forever. Whatever these say, no row an open incident cites is deleted (README, "Maintenance
    and retention"). The sink is the user's: never touched here. ingest_positions has no retention
    (a row per __consumer_offsets partition). partition_summary has no time of its own: its rows
    age with their reconcile run's finish time in audit_runs (a watch appends a run's rows every
    minute, and only the latest run's are read)."""

    ledger: int = 30
    group_commits: int = 30
    group_events: int = 30
    decode_errors: int = 30
    findings: int = 400
    incidents: int = 400
    restarts: int = 400
    audit_runs: int = 400
    validation_results: int = 400
    completeness: int = 400  # by window_end
    partition_summary: int = 30  # by the finished_at of its reconcile run (audit_runs)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if getattr(self, f.name) < 0:
                key = f"maintenance.retention_days.{f.name}"
                raise ConfigError(key, "must be 0 (keep forever) or positive")


# Delta's own safe minimum for VACUUM (delta.deletedFileRetentionDuration's default): files a reader
# of an older version, or a writer that started before them, may still need.
MIN_VACUUM_RETENTION_HOURS: Final = 168


@dataclass(frozen=True)
class MaintenanceConfig:
    """`maintain` (also the nightly's last step): compaction of closed days, log checkpoints, VACUUM
    and per-table retention of every table the project writes."""

    # A ledger day is closed (no running job appends to it any more) when it is older than today
    # less this many days: a job's micro-batch is stamped when it runs, and a clock or a slow batch
    # around midnight still writes yesterday's date for a while.
    closed_after_days: int = 1
    # A closed day (or an unpartitioned table) is compacted only when it holds more files than this.
    compact_min_files: int = 4
    # Files no longer in the table are deleted after this long: time travel (a repair's undo) works
    # this far back. Never below Delta's safe minimum of 168 hours.
    vacuum_retention_hours: int = MIN_VACUUM_RETENTION_HOURS
    retention_days: RetentionConfig = field(default_factory=RetentionConfig)
    include_sink: bool = False  # compact, checkpoint and VACUUM the sink too (never any retention)

    def __post_init__(self) -> None:
        if self.closed_after_days < 1:
            raise ConfigError("maintenance.closed_after_days", "must be at least 1 (today is never closed)")
        if self.compact_min_files < 1:
            raise ConfigError("maintenance.compact_min_files", "must be at least 1")
        if self.vacuum_retention_hours < MIN_VACUUM_RETENTION_HOURS:
            raise ConfigError(
                "maintenance.vacuum_retention_hours",
                f"must be at least {MIN_VACUUM_RETENTION_HOURS} (Delta's safe minimum: 7 days), "
                f"got {self.vacuum_retention_hours}",
            )


@dataclass(frozen=True)
class CompletenessConfig:
    """Completeness per event-time window (the `completeness` table, written by every reconcile)."""

    window_minutes: int = 10
    # A window stays provisional (recomputed) this long after its end: records still in flight.
    # 0 = the job's lateness: twice its trigger interval plus 5 minutes.
    lateness_seconds: int = 0
    lookback_hours: int = 24  # the first run of a job starts this far back (later runs: where it ended)
    floor: float = 1.0  # the check: a final window's completeness is at least this

    def __post_init__(self) -> None:
        if self.window_minutes < 1:
            raise ConfigError("completeness.window_minutes", "must be at least 1")
        if self.lateness_seconds < 0:
            raise ConfigError("completeness.lateness_seconds", "must be 0 (the job's) or positive")
        if self.lookback_hours < 1:
            raise ConfigError("completeness.lookback_hours", "must be at least 1")
        if not 0.0 <= self.floor <= 1.0:
            raise ConfigError("completeness.floor", f"must be between 0 and 1, got {self.floor}")


@dataclass(frozen=True)
class AppConfig:
    env: str
    paths: PathsConfig = field(default_factory=PathsConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    local_kafka: LocalKafkaConfig = field(default_factory=LocalKafkaConfig)
    tables: TablesConfig = field(default_factory=TablesConfig)
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    checks: ChecksConfig = field(default_factory=ChecksConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    completeness: CompletenessConfig = field(default_factory=CompletenessConfig)
    iceberg: IcebergConfig = field(default_factory=IcebergConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError("log_level", f"must be DEBUG, INFO, WARNING or ERROR, got '{self.log_level}'")
        sinks = {"tables.sink": self.tables.sink}
        sinks.update({f"tables.sink_by_job.{job}": v for job, v in self.tables.sink_by_job.items()})
        for key, value in sinks.items():
            check_iceberg_address(value, self.iceberg, key)

    def to_display(self) -> dict[str, Any]:
        """The config as a plain, redacted mapping: the only form that is ever printed or logged."""
        return typing.cast(dict[str, Any], redact(_plain(dataclasses.asdict(self))))


def check_iceberg_address(value: str, iceberg: IcebergConfig, key: str) -> None:
    """Fail, naming ``key``, when ``value`` is an ``iceberg:`` address of no configured catalog or
    not of the form iceberg:<catalog>.<namespace>.<table>."""
    if not value.startswith(ICEBERG_PREFIX):
        return
    address = iceberg_address(value)
    if address is None:
        raise ConfigError(key, f"{value!r}: expected {ICEBERG_PREFIX}<catalog>.<namespace>.<table>")
    if address[0] not in iceberg.catalogs:
        known = ", ".join(sorted(iceberg.catalogs)) or "none configured"
        raise ConfigError(key, f"{value!r} names no catalog of iceberg.catalogs ({known})")


# --- loading -------------------------------------------------------------------------------------


def available_envs(conf_dir: Path) -> list[str]:
    return sorted(p.stem for p in conf_dir.glob("*.yaml") if p.stem != "base")


def load_config(
    env: str = "local",
    overrides: list[str] | None = None,
    conf_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AppConfig:
    """Read, layer, substitute and validate. `environ` is injected so tests need not touch os.environ."""
    directory = conf_dir or DEFAULT_CONF_DIR
    env_file = directory / f"{env}.yaml"
    if env == "base" or not env_file.exists():
        raise ConfigError(
            "env", f"unknown environment '{env}'; available: {', '.join(available_envs(directory))}"
        )
    merged = deep_merge(_read_yaml(directory / "base.yaml"), _read_yaml(env_file))
    for item in overrides or []:
        merged = deep_merge(merged, parse_override(item))
    substituted = substitute_env(merged, os.environ if environ is None else environ, "")
    substituted["env"] = env
    reject_retired_keys(substituted)
    cfg: AppConfig = build_dataclass(AppConfig, substituted, "")
    return cfg


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(path.name, f"not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(path.name, "top level must be a mapping")
    return data


def reject_retired_keys(data: Mapping[str, Any]) -> None:
    """A retired table key fails with the key to use instead (not as an unknown key, which would
    leave the reader to guess where the setting went)."""
    for old, new in RETIRED_TABLE_KEYS.items():
        section, key = old.split(".")
        held = data.get(section)
        if isinstance(held, Mapping) and key in held:
            raise ConfigError(old, f"retired: set {new} instead")


# Property maps whose keys are passed through as they are, dots included.
_PASS_THROUGH_MAPS = {
    ("kafka", "client"),
    ("kafka", "java"),
    ("kafka", "librdkafka"),
    ("spark", "conf"),
    ("storage", "options"),
    ("tables", "sink_by_job"),
    ("reconcile", "sink_mode_by_job"),
    ("reconcile", "sink_app_id_by_job"),
}


def parse_override(item: str) -> dict[str, Any]:
    """'kafka.request_timeout_s=5' -> {'kafka': {'request_timeout_s': 5}} (value parsed as YAML).

    Keys of a pass-through property map may contain dots ('kafka.client.security.protocol=SSL'): after
    the first two levels, the rest of the key is one property name.
    """
    if "=" not in item:
        raise ConfigError(item, "an override must look like key.path=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(key, "empty segment in override key")
    if len(parts) > 2 and (parts[0], parts[1]) in _PASS_THROUGH_MAPS:
        parts = [parts[0], parts[1], ".".join(parts[2:])]
        value: Any = raw  # pass-through properties stay strings, exactly as typed
    else:
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ConfigError(key, f"cannot parse override value: {exc}") from exc
    out: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        out = {part: out}
    return out


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def substitute_env(value: Any, environ: Mapping[str, str], path: str) -> Any:
    if isinstance(value, Mapping):
        return {k: substitute_env(v, environ, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, environ, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def repl(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(path, f"environment variable ${{{name}}} is not set")

        return _ENV_REF.sub(repl, value)
    return value


# --- validation into dataclasses -----------------------------------------------------------------


def build_dataclass(cls: type[Any], data: Any, path: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(path or "<root>", f"expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(where, f"unknown key (known here: {', '.join(sorted(names))})")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = f"{path}.{f.name}" if path else f.name
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(key, "required key is missing")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, key)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(typing.cast(type[Any], tp), value if value is not None else {}, key)
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
        item = typing.get_args(tp)[1]
        if dataclasses.is_dataclass(item):  # a mapping of sections (iceberg.catalogs)
            return {str(k): _coerce(item, v, f"{key}.{k}") for k, v in value.items()}
        return {str(k): _scalar_str(v, f"{key}.{k}") for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(key, f"expected a list, got {type(value).__name__}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(key, f"expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(key, f"expected a string, got {type(value).__name__}")
    if tp is Path:
        if isinstance(value, str) and value:
            return Path(value).expanduser()
        raise ConfigError(key, f"expected a path, got {value!r}")
    raise ConfigError(key, f"unsupported config type {tp}")


def _scalar_str(value: Any, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(key, f"expected a scalar property value, got {type(value).__name__}")


# --- redaction -----------------------------------------------------------------------------------


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact(value: Any, key: str = "") -> Any:
    """Replace the value of every secret-looking key, at any depth, and the password of any URI
    that carries one (a SQL catalog's postgresql://user:password@host/db)."""
    if isinstance(value, Mapping):
        return {k: (REDACTED if is_secret_key(str(k)) and v not in (None, "") else redact(v, str(k)))
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, str):
        return _URI_PASSWORD.sub(rf"\1{REDACTED}@", value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value
