"""How delta-rs reaches a table, and the split by table role between the two Delta libraries that
`facade.engine_for` applies, the same on every storage.

Spark does whatever scales with the data: the sink scan and any write of it, the decoded
`__consumer_offsets` records of ingest-offsets on a cluster (with a local master the driver appends
them through delta-rs, `routes.decode_route`), a quality check's table too large for the driver
(``routes.check_route``). The
driver-side work goes through delta-rs (the ``deltalake`` package), which commits in milliseconds
without a Spark job or a task slot: the ledger's micro-batch appends, the ledger window and the
group commits the reconciliation analyses on the driver in Arrow, and the small audit tables
(findings, incidents, restarts and ingest positions MERGEd, partition summaries and run records
appended), and the reads of the checks' small tables and of the dashboard. That split holds on
local files and on object storage alike; this module is the only one that opens a table with
delta-rs (``delta_rows``, ``maintenance`` and ``handles`` go through `open_table` and `location`),
and no module outside this package writes a Delta table but through a table's handle (``handles``).

delta-rs reaches object storage with the settings Spark uses. For s3a:// it takes the ``fs.s3a.*``
properties and translates them into its own storage options: from the Hadoop configuration of a
session that runs anyway (where config ``storage.options`` are put by
``runtime.spark.apply_storage_options``, and where a cluster's ``spark.hadoop.*`` defaults land),
and from config ``storage.options`` themselves where no session runs, so that a command that only
reads small tables on the driver (``incidents``, a repair plan, a timeline) starts no JVM
(``runtime.session.table_storage`` chooses). Other object stores (abfss://, gs://, hdfs://) are
handed to delta-rs as they are, with the credentials of its own environment (managed identity,
``GOOGLE_APPLICATION_CREDENTIALS``, ...): no Hadoop property of theirs is translated.

Commits on S3 are safe against another delta-rs writer: delta-rs 1.x writes each commit file
with a conditional put (If-None-Match), which AWS S3 and the usual S3 servers honour, so of two
writers of one version one gets a conflict and retries on the newer version. We therefore never
set ``AWS_S3_ALLOW_UNSAFE_RENAME``, which would switch delta-rs to a copy-then-delete commit that
can silently overwrite a concurrent one. Spark's s3a log store is a single-driver one (the Delta
documentation's S3 caveat), so a table must not be written by Spark on two drivers at once, nor
by Spark and delta-rs at once: each table's writers above run one after the other in one job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlparse

from app.config import REDACTED, StorageConfig, is_secret_key
from app.errors import InfrastructureError

if TYPE_CHECKING:
    import pyarrow.dataset
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

LOCAL_SCHEMES = ("", "file")
S3_SCHEMES = ("s3a", "s3", "s3n")
S3A_PREFIX = "fs.s3a."

# Where the object-storage settings of a table come from: a live session's Hadoop configuration, or
# the config's storage options where no session runs. None serves local tables only.
StorageSettings: TypeAlias = "SparkSession | StorageConfig | None"


@dataclass(frozen=True)
class Location:
    """A table as delta-rs addresses it: its URI and the storage options to reach it."""

    uri: str
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def secrets(self) -> list[str]:
        return [v for k, v in self.options.items() if is_secret_key(k) and v]

    def __repr__(self) -> str:  # option names only: the values hold credentials
        return f"Location({self.uri!r}, options={sorted(self.options)})"


def s3_options(props: Mapping[str, str], bucket: str) -> dict[str, str]:
    """delta-rs storage options for ``bucket`` from s3a properties (names without ``fs.s3a.``).

    Hadoop's per-bucket settings (``bucket.<name>.<property>``) win over the general ones, as in
    s3a. Only what both sides mean the same way is translated; the rest keeps delta-rs's defaults
    (path-style requests on a custom endpoint, the AWS credential chain without static keys).
    """
    per_bucket = f"bucket.{bucket}."
    merged = {k: v for k, v in props.items() if not k.startswith("bucket.")}
    merged.update({k.removeprefix(per_bucket): v for k, v in props.items() if k.startswith(per_bucket)})
    ssl = merged.get("connection.ssl.enabled", "true").strip().lower() != "false"
    options: dict[str, str] = {}
    endpoint = merged.get("endpoint", "").strip()
    if endpoint:
        # s3a takes a bare host[:port] and picks the scheme from connection.ssl.enabled.
        if "://" not in endpoint:
            endpoint = ("https://" if ssl else "http://") + endpoint
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    region = merged.get("endpoint.region") or merged.get("region")
    if region:
        options["AWS_REGION"] = region
    if merged.get("path.style.access", "").strip().lower() == "true":
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    for hadoop_key, delta_rs_key in (
        ("access.key", "AWS_ACCESS_KEY_ID"),
        ("secret.key", "AWS_SECRET_ACCESS_KEY"),
        ("session.token", "AWS_SESSION_TOKEN"),
    ):
        if merged.get(hadoop_key):
            options[delta_rs_key] = merged[hadoop_key]
    return options


def location_of(path: str, s3a_props: Mapping[str, str]) -> Location:
    """Where delta-rs finds the table at ``path`` (a Spark path or URI), given the s3a properties."""
    parsed = urlparse(path)
    if parsed.scheme in LOCAL_SCHEMES:
        return Location(parsed.path)
    if parsed.scheme in S3_SCHEMES:
        # s3:// is delta-rs's own name for the store s3a:// (and the old s3n://) reach.
        return Location("s3://" + path.split("://", 1)[1], s3_options(s3a_props, parsed.netloc))
    return Location(path)


def hadoop_s3a_properties(spark: SparkSession) -> dict[str, str]:
    """The driver's Hadoop ``fs.s3a.*`` properties, without the prefix: what Spark's s3a uses."""
    # pyspark exposes the Hadoop configuration only through the Java context.
    props: Any = spark.sparkContext._jsc.hadoopConfiguration().getPropsWithPrefix(S3A_PREFIX)
    return {str(k): str(v) for k, v in props.items()}


def config_s3a_properties(storage: StorageConfig) -> dict[str, str]:
    """The ``fs.s3a.*`` properties of config ``storage.options``, without the prefix: what a
    session would put into its Hadoop configuration, known without starting one."""
    return {k.removeprefix(S3A_PREFIX): v for k, v in storage.options.items() if k.startswith(S3A_PREFIX)}


def location(settings: StorageSettings, path: str) -> Location:
    """The table at ``path`` as delta-rs reaches it with ``settings``: a session's Hadoop
    configuration (which also holds a cluster's own defaults) or the config's storage options."""
    if urlparse(path).scheme not in S3_SCHEMES:
        return location_of(path, {})
    if settings is None:
        raise InfrastructureError(
            f"a table on object storage ({path}) needs the storage settings of the config or the session"
        )
    if isinstance(settings, StorageConfig):
        return location_of(path, config_s3a_properties(settings))
    return location_of(path, hadoop_s3a_properties(settings))


# delta-rs colours the causes in its error texts with terminal escapes; logs want plain text.
_TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` without terminal escapes and with every secret replaced."""
    text = _TERMINAL_ESCAPE.sub("", text)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


@contextmanager
def storage_errors(where: Location, doing: str) -> Iterator[None]:
    """delta-rs's storage failures as InfrastructureError, with no credential in the message (nor
    in the chained cause when the original text held one)."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (OSError, DeltaError) as exc:
        text = str(exc)
        clean = scrub(text, where.secrets)
        error = InfrastructureError(f"cannot {doing} the table at {where.uri}: {clean}")
        if scrub(text, []) != clean:  # the original names a credential: not even as the cause
            raise error from None
        raise error from exc


def open_table(where: Location, version: int | None = None) -> DeltaTable | None:
    """The table at ``where`` through delta-rs (as of ``version``, else its newest), or None when
    there is none yet. A version whose log entries were cleaned up raises InfrastructureError."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    with storage_errors(where, "open"):
        try:  # one load of the log, where is_deltatable first would read it twice
            return DeltaTable(where.uri, version=version, storage_options=dict(where.options))
        except TableNotFoundError:
            return None


def arrow_dataset(table: DeltaTable, where: Location, files: str | None = None) -> pyarrow.dataset.Dataset:
    """The table's current files as an Arrow dataset; with ``files`` (a SQL predicate), only those
    whose log statistics (partition values, min/max per column) do not rule the predicate out.

    A local table is read through Arrow's own file system. By default delta-rs reads through a file
    handler written in Python, whose buffers are Python objects; Arrow's I/O threads may release the
    last of them while the interpreter shuts down, which aborts the process (SIGABRT, "terminate
    called without an active exception") after its work is done. Object stores keep delta-rs's
    handler, which holds their credentials; the CLI's end (``app.cli.run_and_exit``) covers them.
    """
    with storage_errors(where, "read"):
        if urlparse(where.uri).scheme in LOCAL_SCHEMES:
            from pyarrow import fs

            root = fs.SubTreeFileSystem(os.path.abspath(where.uri), fs.LocalFileSystem())
            return table.to_pyarrow_dataset(filesystem=root, file_pruning_predicate=files)
        return table.to_pyarrow_dataset(file_pruning_predicate=files)
