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

Everything here is re-exported from the modules that own it (`app.attach`, the ledger import of
`app.stream.ledger_import`); this module only names the supported surface. Importing it starts no
Spark session or JVM and reads no file: no configuration, no `conf/` directory. The functions use
the active SparkSession (the job's own), and take storage settings as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

from app import __version__
from app.attach import Attachment, SessionAudit, attach, attach_session
from app.config import StorageConfig
from app.errors import AttachError, OffsetAuditError
from app.stream.checkpoint import CheckpointFiles
from app.stream.ledger_import import ImportResult
from app.stream.ledger_import import import_checkpoint as _import_checkpoint

__all__ = [
    "AttachError",
    "Attachment",
    "ImportResult",
    "OffsetAuditError",
    "SessionAudit",
    "__version__",
    "attach",
    "attach_session",
    "import_checkpoint",
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
