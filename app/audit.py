"""The public API: what a streaming job of your own, outside this repository, calls to be audited.

    from app import audit

    query = payments.writeStream.format("delta").option("checkpointLocation", cp).start(path)
    with audit.attach(query, job_name="payments", ledger="s3a://bucket/audit/ledger"):
        query.awaitTermination()  # leaving the block (even by a failed query's error) waits
                                  # until the run's last events are in the ledger

and, for a query that was never attached, from a session that can read its checkpoint:

    audit.import_checkpoint("s3a://bucket/checkpoints/payments", job_name="payments",
                            ledger="s3a://bucket/audit/ledger",
                            sink="s3a://bucket/tables/payments")  # optional: its Delta sink

and for a Flink job, from any process that reaches its JobManager and its checkpoint directory:

    audit.watch_flink_job("http://jobmanager:8081", job_name="payments", ledger=...,
                          flink_job_name="payments", group_id="payments")  # until SIGTERM
    audit.import_flink_checkpoints("/checkpoints/payments", job_name="payments", ledger=...)

Everything here is re-exported from the modules that own it (`app.stream.attach`, the ledger import of
`app.stream.ledger_import`); this module only names the supported surface. Importing it starts no
Spark session or JVM and reads no file: no configuration, no `conf/` directory. The functions use
the active SparkSession (the job's own), and take storage settings as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

from app import __version__
from app.config import KafkaConfig, StorageConfig
from app.errors import AttachError, FlinkRestError, FlinkStateError, OffsetAuditError
from app.flink.import_ import FlinkImportResult, import_retained
from app.flink.watcher import DEFAULT_POLL_S, FlinkLedger, Stop, WatchSummary
from app.stream.attach import Attachment, SessionAudit, attach, attach_session
from app.stream.checkpoint import CheckpointFiles
from app.stream.ledger_import import ImportResult
from app.stream.ledger_import import import_checkpoint as _import_checkpoint

__all__ = [
    "AttachError",
    "Attachment",
    "FlinkImportResult",
    "FlinkRestError",
    "FlinkStateError",
    "ImportResult",
    "OffsetAuditError",
    "SessionAudit",
    "WatchSummary",
    "__version__",
    "attach",
    "attach_session",
    "import_checkpoint",
    "import_flink_checkpoints",
    "watch_flink_job",
]


def import_checkpoint(
    checkpoint: str,
    *,
    job_name: str,
    ledger: str,
    storage_options: Mapping[str, str] | None = None,
    sink: str | None = None,
    sink_app_id: str | None = None,
) -> ImportResult:
    """Backfill job ``job_name``'s ledger at ``ledger`` from the Spark checkpoint directory
    ``checkpoint`` (a query's `checkpointLocation`), as `offset-audit ledger-import` does.

    Writes what the checkpoint still retains (its last `spark.sql.streaming.minBatchesToRetain`
    batches) and the ledger lacks; importing again adds nothing. ``storage_options`` are Hadoop
    `fs.*` properties for the ledger's object store (default: the active session's Hadoop
    configuration).

    ``sink``: the query's Delta sink. Its transaction log is read too: each imported completion's
    detail names the sink version(s) and commit time of its batch, and the result counts the
    imported completions the sink holds (``sink_holds``), lacks (``sink_lacks``: lost batches,
    which `reconcile` names) and can no longer verify past the log's retention. ``sink_app_id``:
    the txn app id of its commits, by default the query's id (what Spark's Delta sink writes); a
    ``foreachBatch`` names its own. Raises UsageError when ``checkpoint`` holds no Spark checkpoint,
    or ``sink`` no Delta table or no commit of the app id (nothing is written then)."""
    spark = SparkSession.active()
    files = CheckpointFiles(spark, checkpoint.rstrip("/"))
    storage = StorageConfig(options=dict(storage_options)) if storage_options else spark
    sink_path = None if sink is None else sink.rstrip("/")
    return _import_checkpoint(files, ledger, job_name, storage, sink=sink_path, sink_app_id=sink_app_id)


def watch_flink_job(
    rest: str,
    *,
    job_name: str,
    ledger: str,
    flink_job_id: str | None = None,
    flink_job_name: str | None = None,
    group_id: str | None = None,
    poll_s: float = DEFAULT_POLL_S,
    startup_mode: str | None = None,
    startup_key: str | None = None,
    kafka: KafkaConfig | None = None,
    bootstrap: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    stop: Stop | None = None,
    max_polls: int | None = None,
    wait_s: float = 0.0,
) -> WatchSummary:
    """Follow a running Flink job from its JobManager's REST API at ``rest`` and write job
    ``job_name``'s ledger at ``ledger``, as `offset-audit flink-watch` does: the job ``flink_job_id``
    until it ends, or the newest job named ``flink_job_name`` (and each resubmission) until ``stop``
    (`app.runtime.signals.StopSignal`: SIGTERM, SIGINT; default: a new one, not installed).

    ``group_id``: the group the job's Kafka source commits to. An attempt started without state is
    judged from where its sources started: its startup mode is the job parameter ``startup_key``
    publishes, else ``startup_mode`` (earliest, latest, group), else what its first checkpoint's
    markers say, and the broker at ``bootstrap`` (client settings ``kafka``) gives the mode's
    offsets (without a bootstrap, no start offsets are recorded). ``storage_options``: Hadoop `fs.*`
    properties of the ledger's object store. Raises FlinkRestError when the REST API cannot be
    reached at the start, within ``wait_s`` seconds (later outages are retried), and UsageError for
    an unknown job id."""
    from app.flink.follower import SidecarSettings, open_sidecar
    from app.runtime.signals import StopSignal

    sidecar = open_sidecar(
        SidecarSettings(
            rest,
            job_name,
            ledger,
            flink_job_id=flink_job_id,
            flink_job_name=flink_job_name,
            group_id=group_id,
            poll_s=poll_s,
            startup_mode=startup_mode,
            startup_key=startup_key,
            kafka=kafka,
            bootstrap=bootstrap,
            storage_options=storage_options,
        )
    )
    stop = stop or StopSignal()
    try:
        sidecar.watcher.start(wait_s, stop)
        return sidecar.watcher.follow(stop, max_polls)
    finally:
        sidecar.close()


def import_flink_checkpoints(
    path: str,
    *,
    job_name: str,
    ledger: str,
    group_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> FlinkImportResult:
    """Backfill job ``job_name``'s ledger at ``ledger`` from the Flink checkpoints (`chk-N`) and
    savepoints retained under the directory ``path`` (local, or ``s3a://``/``s3://``/``s3p://``
    reached with ``storage_options``), as `offset-audit flink-import` does;
    importing again adds nothing. A checkpoint that does not decode is reported in the result's
    ``unreadable`` and writes nothing."""
    return import_retained(
        path,
        FlinkLedger(_storage(storage_options), ledger, job_name),
        group_id=group_id,
        storage_options=storage_options,
    )


def _storage(options: Mapping[str, str] | None) -> StorageConfig:
    return StorageConfig(options=dict(options or {}))
