"""An Iceberg table on the driver, without a JVM (pyiceberg): where its metadata is, and its snapshot
log: every snapshot still in the metadata (id, parent, sequence number, time, operation, summary),
the table's current history (the current snapshot and its ancestors) and the ``snapshot-log``.

An Iceberg sink is addressed as users address it (README "Sink modes"): through a catalog of
`iceberg.catalogs` as ``iceberg:<catalog>.<namespace>.<table>``, or by the path of the table's
directory, whose ``metadata/`` holds its ``*.metadata.json`` files (a Hadoop catalog's table, or any
table whose files are reachable). A path-based table's current metadata is the one
``metadata/version-hint.text`` names, else the newest by its version number: the files are read
through the storage layer the Delta sinks use (`driver_files`), so local and S3 paths both work.

What the log tells apart (CONTRACTS.md section 4): a snapshot still in the metadata but no longer
in the current history was taken out by a rollback (``rollback_to_snapshot``,
``set_current_snapshot``); a snapshot no longer in the metadata expired (``expire_snapshots``), and
what it held is unknown. Expiry removes the oldest snapshots, so the oldest one left whose parent is
gone dates the history's start (``SnapshotLog.starts_at``), as log retention does for Delta.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from app.config import IcebergCatalogConfig, IcebergConfig, iceberg_address
from app.errors import ConfigError, InfrastructureError
from app.storage import backend, driver_files
from app.storage.delta_log import SinkCommit, SinkLog

# The summary keys the writers put in each snapshot: Spark's Iceberg streaming sink (SparkWrite's
# streaming write: the query's id and the epoch, i.e. the batch id) and a foreachBatch writing with
# the write options snapshot-property.<key>; Flink's IcebergFilesCommitter (SinkUtil).
SPARK_QUERY_ID: Final = "spark.sql.streaming.queryid"  # written spark.sql.streaming.queryId: read lower-cased
SPARK_EPOCH_ID: Final = "spark.sql.streaming.epochid"
FLINK_JOB_ID: Final = "flink.job-id"
FLINK_OPERATOR_ID: Final = "flink.operator-id"
FLINK_MAX_CHECKPOINT: Final = "flink.max-committed-checkpoint-id"

# The keys whose values name a snapshot's writer, as they are spelled in the summaries.
_NAMING_KEYS: Final = ("spark.sql.streaming.queryId", SPARK_QUERY_ID, FLINK_JOB_ID)

METADATA_DIR: Final = "metadata"
VERSION_HINT: Final = "version-hint.text"
METADATA_SUFFIX: Final = ".metadata.json"
# v12.metadata.json (Hadoop tables) or 00012-<uuid>.metadata.json (catalog commits).
_METADATA_VERSION = re.compile(r"^v?(\d+)")


@dataclass(frozen=True)
class Snapshot:
    """One snapshot as the table's metadata records it."""

    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    timestamp: datetime
    operation: str | None
    summary: Mapping[str, str] = field(default_factory=dict)

    def added_records(self) -> int:
        """The records its data files added (0 for a commit that added none, e.g. an empty batch)."""
        try:
            return int(self.summary.get("added-records", 0))
        except ValueError:
            return 0


@dataclass(frozen=True)
class SnapshotLog:
    """The snapshots still in the table's metadata, oldest first, and the table's current history.

    ``ancestry``: the current snapshot and its ancestors still in the metadata; ``history``: the
    ``snapshot-log`` (snapshot id, when it became current), which a rollback appends to;
    ``metadata_location``: the metadata file read; ``named``: the app ids any snapshot names (a
    Spark query's id, a Flink job id), those whose summaries were left out included."""

    snapshots: tuple[Snapshot, ...]
    current: int | None
    ancestry: frozenset[int]
    history: tuple[tuple[int, datetime], ...]
    metadata_location: str
    named: frozenset[str] = frozenset()

    @property
    def starts_at(self) -> datetime | None:
        """When the oldest snapshot left was committed, when expiry removed older ones (its parent is
        no longer in the metadata); None for a complete history. A batch completed before it may
        have had a snapshot that expired: unverifiable, not lost."""
        ids = {s.snapshot_id for s in self.snapshots}
        expired_parents = [s for s in self.snapshots if s.parent_id is not None and s.parent_id not in ids]
        return max((s.timestamp for s in expired_parents), default=None)

    def rolled_back(self) -> dict[int, int]:
        """Snapshot id -> the snapshot the table went back to, for every snapshot in the metadata
        that the current history does not hold: a rollback (or a ``set_current_snapshot``) took
        its output out. The snapshot gone back to is the first one the ``snapshot-log`` made
        current after it that does not descend from it (the current one when the log says none)."""
        gone = [s for s in self.snapshots if s.snapshot_id not in self.ancestry]
        if not gone:
            return {}
        parents = {s.snapshot_id: s.parent_id for s in self.snapshots}
        out: dict[int, int] = {}
        for s in gone:
            after = (sid for sid, when in self.history if when >= s.timestamp and sid != s.snapshot_id)
            target = next((sid for sid in after if s.snapshot_id not in ancestry_of_id(parents, sid)), None)
            out[s.snapshot_id] = target if target is not None else (self.current or 0)
        return out


def _millis(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC)


def parse_snapshot_log(text: str, metadata_location: str, since: datetime | None = None) -> SnapshotLog:
    """A metadata file's JSON as a ``SnapshotLog`` (the table-metadata spec's field names). Parsed as
    plain JSON rather than through pyiceberg's model: only the snapshot list is needed, and a
    table of a week of one-minute batches holds 10,000 of them. The summaries of snapshots older
    than ``since`` are left out (their batches lie before the audited window): of those only their
    place in the history is kept, and the app ids they name (``SnapshotLog.named``)."""
    doc: dict[str, Any] = json.loads(text)
    since_ms = None if since is None else since.timestamp() * 1000
    named: set[str] = set()
    snapshots: list[Snapshot] = []
    for s in doc.get("snapshots") or []:
        summary: dict[str, str] = s.get("summary") or {}
        named.update(v for key in _NAMING_KEYS if (v := summary.get(key)))
        ms = int(s["timestamp-ms"])
        parent = s.get("parent-snapshot-id")
        snapshots.append(
            Snapshot(
                snapshot_id=int(s["snapshot-id"]),
                parent_id=None if parent is None else int(parent),
                sequence_number=int(s.get("sequence-number", 0)),
                timestamp=_millis(ms),
                operation=summary.get("operation"),
                summary=dict(summary) if since_ms is None or ms >= since_ms else {},
            )
        )
    snapshots.sort(key=lambda s: (s.sequence_number, s.timestamp, s.snapshot_id))
    current = doc.get("current-snapshot-id")
    current = None if current in (None, -1) else int(current)
    ordered = tuple(snapshots)
    return SnapshotLog(
        snapshots=ordered,
        current=current,
        ancestry=ancestry_of(ordered, current),
        history=tuple(
            (int(e["snapshot-id"]), _millis(int(e["timestamp-ms"]))) for e in doc.get("snapshot-log") or []
        ),
        metadata_location=metadata_location,
        named=frozenset(named),
    )


def ancestry_of(snapshots: tuple[Snapshot, ...], current: int | None) -> frozenset[int]:
    """``current`` and its ancestors still in the metadata (the walk stops at an expired parent)."""
    parents = {s.snapshot_id: s.parent_id for s in snapshots}
    out: set[int] = set()
    at = current
    while at is not None and at in parents and at not in out:
        out.add(at)
        at = parents[at]
    return frozenset(out)


def ancestry_of_id(parents: Mapping[int, int | None], snapshot_id: int) -> set[int]:
    """``snapshot_id`` and its ancestors in ``parents`` (snapshot id -> parent id)."""
    out: set[int] = set()
    at: int | None = snapshot_id
    while at is not None and at not in out:
        out.add(at)
        at = parents.get(at)
    return out


def metadata_version(name: str) -> int | None:
    """The version a metadata file's name carries, None for any other file of ``metadata/``."""
    if not name.endswith(METADATA_SUFFIX):
        return None
    match = _METADATA_VERSION.match(name)
    return int(match.group(1)) if match else None


def newest_metadata(names: list[str], hint: str | None) -> str | None:
    """The current metadata file among ``names`` (of ``metadata/``): the version-hint's, else the
    highest version, None when there is none."""
    if hint is not None and hint.strip().isdigit():
        hinted = f"v{hint.strip()}{METADATA_SUFFIX}"
        if hinted in names:
            return hinted
    versions = [(v, n) for n in names if (v := metadata_version(n)) is not None]
    return max(versions)[1] if versions else None


def is_table_directory(storage: backend.StorageSettings, path: str) -> bool:
    """Whether ``path`` is an Iceberg table's directory (its ``metadata/`` holds a metadata file)."""
    if not driver_files.driver_readable(path):
        return False
    names = driver_files.DriverDirectory.at(storage, path).names(METADATA_DIR)
    return any(metadata_version(n) is not None for n in names)


@dataclass(frozen=True)
class IcebergTableRef:
    """An Iceberg table as configured: its address (``iceberg:...`` or a path) and the catalogs."""

    location: str
    catalogs: IcebergConfig

    def catalog(self) -> tuple[str, IcebergCatalogConfig, str, str] | None:
        """(catalog name, its config, namespace, table) of a catalog address, None for a path."""
        address = iceberg_address(self.location)
        if address is None:
            return None
        name, namespace, table = address
        config = self.catalogs.catalogs.get(name)
        if config is None:
            raise ConfigError(self.location, f"no catalog {name!r} in iceberg.catalogs")
        return name, config, namespace, table

    def directory(self) -> str | None:
        """The table's directory where it is known without a catalog service: a path, or a Hadoop
        catalog's <warehouse>/<namespace...>/<table>."""
        found = self.catalog()
        if found is None:
            return self.location
        _, config, namespace, table = found
        if config.type != "hadoop":
            return None
        return "/".join([config.warehouse.rstrip("/"), *namespace.split("."), table])


def _pyiceberg_properties(name: str, config: IcebergCatalogConfig) -> dict[str, str]:
    props = dict(config.properties)
    if config.uri:
        props["uri"] = config.uri
    if config.warehouse:
        props["warehouse"] = config.warehouse
    return props


def _catalog_metadata_location(name: str, config: IcebergCatalogConfig, namespace: str, table: str) -> str:
    """The current metadata file of a table of a SQL or REST catalog, asked of the catalog."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    catalog = load_catalog(name, **{"type": config.type, **_pyiceberg_properties(name, config)})
    try:
        loaded = catalog.load_table((*namespace.split("."), table))
    except NoSuchTableError as exc:
        raise ConfigError(f"iceberg:{name}.{namespace}.{table}", "no such table in its catalog") from exc
    return str(loaded.metadata_location)


def current_metadata(storage: backend.StorageSettings, ref: IcebergTableRef) -> tuple[str, str] | None:
    """(location, text) of the table's current metadata file; None when there is no table there."""
    directory = ref.directory()
    if directory is None:
        found = ref.catalog()
        assert found is not None  # a path always has a directory
        location = _catalog_metadata_location(*found)
        folder, _, name = location.rpartition("/")
        text = driver_files.DriverDirectory.at(storage, folder).read_text(name)
        if text is None:
            raise InfrastructureError(f"the catalog names metadata file {location}, which cannot be read")
        return location, text
    if not driver_files.driver_readable(directory):
        raise ConfigError(ref.location, "an Iceberg table is read on the driver from a local or S3 path")
    files = driver_files.DriverDirectory.at(storage, directory)
    newest = newest_metadata(files.names(METADATA_DIR), files.read_text(f"{METADATA_DIR}/{VERSION_HINT}"))
    if newest is None:
        return None
    text = files.read_text(f"{METADATA_DIR}/{newest}")
    if text is None:  # replaced by a newer commit between the listing and the read: read again
        return current_metadata(storage, ref)
    return f"{directory.rstrip('/')}/{METADATA_DIR}/{newest}", text


def read_snapshot_log(
    storage: backend.StorageSettings, ref: IcebergTableRef, since: datetime | None = None
) -> SnapshotLog | None:
    """The table's snapshot log (the summaries from ``since`` on), or None when there is no Iceberg
    table at the address."""
    found = current_metadata(storage, ref)
    return None if found is None else parse_snapshot_log(found[1], found[0], since)


def load_table(storage: backend.StorageSettings, ref: IcebergTableRef) -> Any:
    """The pyiceberg ``Table`` (a read-only ``StaticTable`` of the current metadata file), for what
    needs manifests; None when there is no table."""
    from pyiceberg.table import StaticTable

    found = current_metadata(storage, ref)
    return None if found is None else StaticTable.from_metadata(found[0])


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def as_sink_commit(snapshot: Snapshot) -> SinkCommit:
    """A snapshot as the commit of a batch sink: its txn the Spark query's (id, epoch) of its
    summary, its ``flink`` the Flink committer's (job, operator, max committed checkpoint)."""
    # Spark lower-cases write options, so a foreachBatch's snapshot-property.<key> lands as
    # spark.sql.streaming.queryid; the streaming sink writes the keys as spelled: read both.
    summary = {k.lower(): v for k, v in snapshot.summary.items()}
    query, epoch = summary.get(SPARK_QUERY_ID), _int(summary.get(SPARK_EPOCH_ID))
    job, checkpoint = summary.get(FLINK_JOB_ID), _int(summary.get(FLINK_MAX_CHECKPOINT))
    return SinkCommit(
        version=snapshot.snapshot_id,
        timestamp=snapshot.timestamp,
        operation=snapshot.operation,
        txns=((query, epoch),) if query and epoch is not None else (),
        rows_added=snapshot.added_records(),
        flink=(job, summary.get(FLINK_OPERATOR_ID, ""), checkpoint)
        if job and checkpoint is not None
        else None,
    )


def sink_log_of(log: SnapshotLog, since: datetime | None = None) -> SinkLog:
    """The snapshot log as a batch sink's log (`delta_log.SinkLog`): the snapshots committed at or
    after ``since`` (older ones hold batches before the audited window), what a rollback took out,
    and where an expiry left the history's start."""
    kept = [s for s in log.snapshots if since is None or s.timestamp >= since]
    return SinkLog(
        commits=tuple(as_sink_commit(s) for s in kept),
        first_version=None,
        taken_back=log.rolled_back(),
        expired_before=log.starts_at,
        version_key="snapshot_ids",
        undone_key="rolled_back_to",
        gone_meaning="the sink's snapshots of this time expired (expire_snapshots)",
        named_apps=log.named,
    )
