"""Small files read on the driver without a JVM: a Delta table's commit files (`delta_log`) and a
query's checkpoint (`stream.ledger_import`'s checks before its session starts), through Arrow's
local file system or delta-rs's object store, with the storage settings delta-rs tables get
(`backend.location`).

`storage.files` reads the same files through Hadoop's file system, which needs a session; it
reaches every scheme Hadoop has a connector for. Here a checkpoint is read only where delta-rs is
known to reach it with the config's settings (`DRIVER_SCHEMES`: local paths and the S3 schemes).
`file_at` reaches one file or prefix of a bucket the same way (a Flink checkpoint's files).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlparse

from pyarrow import fs

from app.storage import backend

# Where a directory other than a table's is read without a JVM (see the module's docstring).
DRIVER_SCHEMES: Final = backend.LOCAL_SCHEMES + backend.S3_SCHEMES


def driver_readable(path: str) -> bool:
    """Whether ``path`` (a Spark path or URI) is read here rather than through Hadoop."""
    return urlparse(path).scheme in DRIVER_SCHEMES


def file_system(where: backend.Location) -> tuple[fs.FileSystem, str]:
    """The file system that reaches ``where`` and the location's own path in it."""
    if urlparse(where.uri).scheme in backend.LOCAL_SCHEMES:
        # Arrow's own local file system, for the shutdown reason `backend.arrow_dataset` gives.
        return fs.LocalFileSystem(), os.path.abspath(urlparse(where.uri).path)
    from deltalake.fs import DeltaStorageHandler

    # delta-rs's object store is rooted at the location: paths in it are relative.
    return fs.PyFileSystem(DeltaStorageHandler(where.uri, dict(where.options))), ""


def store_errors() -> tuple[type[BaseException], ...]:
    """What the file systems of `file_at` raise for a failed read or listing, beside ``OSError``
    (the delta-rs exceptions stay behind this module, as every Delta library import does)."""
    from deltalake.exceptions import DeltaError

    return (OSError, DeltaError)


def file_at(storage: backend.StorageSettings, path: str) -> tuple[fs.FileSystem, str, backend.Location]:
    """The file system that reaches ``path`` (a local path or an S3 URI), the path's own path in it,
    and the location errors name and mask (`backend.storage_errors`): an S3 file system is rooted at
    the bucket, so one store (and its client) serves every file of it."""
    parsed = urlparse(path)
    if parsed.scheme not in backend.S3_SCHEMES:
        where = backend.location(storage, path)
        files, root = file_system(where)
        return files, root, where
    bucket = backend.location(storage, f"{parsed.scheme}://{parsed.netloc}")
    return _bucket_files(bucket), parsed.path.strip("/"), bucket


def _bucket_files(bucket: backend.Location) -> fs.FileSystem:
    return _bucket_store(bucket.uri, tuple(sorted(bucket.options.items())))


@functools.lru_cache(maxsize=16)
def _bucket_store(uri: str, options: tuple[tuple[str, str], ...]) -> fs.FileSystem:
    files, _ = file_system(backend.Location(uri, dict(options)))
    return files


@dataclass(frozen=True)
class DriverDirectory:
    """A directory read on the driver: its files' text and its entries' names."""

    where: backend.Location
    files: fs.FileSystem
    root: str

    @classmethod
    def at(cls, storage: backend.StorageSettings, path: str) -> DriverDirectory:
        where = backend.location(storage, path)
        files, root = file_system(where)
        return cls(where, files, root)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}" if self.root else name

    def read_text(self, name: str) -> str | None:
        """The file ``name`` (relative to the directory) as text, None when it does not exist."""
        with backend.storage_errors(self.where, "read"):
            path = self._path(name)
            if self.files.get_file_info(path).type != fs.FileType.File:
                return None
            with self.files.open_input_stream(path) as stream:
                return str(stream.read().decode("utf-8"))

    def names(self, name: str) -> list[str]:
        """The names of the entries of the subdirectory ``name`` (empty when it does not exist)."""
        with backend.storage_errors(self.where, "list"):
            listed = self.files.get_file_info(fs.FileSelector(self._path(name), allow_not_found=True))
        return [info.base_name for info in listed]
