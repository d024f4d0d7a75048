"""Where a checkpoint's files are and how their bytes are read: the decoder's only I/O.

Locations are strings as Flink writes them: a plain path, a URI (``file:/x``, ``file:///x``), or an
object on S3 (``s3://``, ``s3a://``, ``s3p://``: Flink's plugins' names for the one store, all read
through delta-rs's object store by `app.storage.driver_files`, with the Hadoop ``fs.s3a.*`` settings
of ``storage_options`` as the tables get them). Errors name the location, never a credential.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from pyarrow import fs

from app.config import StorageConfig
from app.errors import FlinkCheckpointGoneError, FlinkStateError, InfrastructureError
from app.storage import backend, driver_files

METADATA_FILE_NAME: Final = "_metadata"
# Flink's S3 file systems (Hadoop's `s3a`/`s3`, Presto's `s3p`) name the same objects.
OBJECT_STORE_SCHEMES: Final = ("s3", "s3a", "s3p")


def local_path(location: str) -> Path | None:
    """The local path of ``location``, or None when it names another file system."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            return None
        return Path(unquote(parts.path))
    if parts.scheme and len(parts.scheme) > 1:  # a one-letter "scheme" is a Windows drive
        return None
    return Path(location)


def metadata_location(location: str) -> tuple[str, str]:
    """(checkpoint directory, its ``_metadata``) for a checkpoint directory or its ``_metadata``."""
    trimmed = location.rstrip("/") or location
    if posixpath.basename(trimmed) == METADATA_FILE_NAME:
        return posixpath.dirname(trimmed), trimmed
    local = local_path(trimmed)
    if local is not None and local.is_file():
        return str(local.parent), trimmed
    return trimmed, f"{trimmed}/{METADATA_FILE_NAME}"


def state_file_location(checkpoint_dir: str, path: str, relative: bool) -> str:
    """Where a state handle's file is: beside ``_metadata`` when relative, else the path Flink wrote."""
    if not relative:
        return path
    if not path or "/" in path or path in (".", ".."):
        raise FlinkStateError(checkpoint_dir, f"relative state file {path!r} is not a file name")
    return f"{checkpoint_dir}/{path}"


def moved_state_file_location(checkpoint_dir: str, path: str) -> str:
    """Where the file Flink wrote at ``path`` is once its checkpoint directory was copied elsewhere."""
    return f"{checkpoint_dir}/{posixpath.basename(urlsplit(path).path)}"


def object_store_path(location: str) -> str | None:
    """``location`` as the s3a URI the storage settings reach, or None when it is no S3 object."""
    scheme, sep, rest = location.partition("://")
    return f"s3a://{rest}" if sep and scheme.lower() in OBJECT_STORE_SCHEMES else None


@dataclass(frozen=True)
class StoredFile:
    """A file under a listed directory: its path relative to it, and when it was last written."""

    relative: str
    modified_ms: int


def _store(
    location: str, storage_options: Mapping[str, str] | None
) -> tuple[fs.FileSystem, str, backend.Location]:
    uri = object_store_path(location)
    if uri is None:
        raise FlinkStateError(
            location, "is on a file system that cannot be read (local paths, s3://, s3a:// and s3p:// can)"
        )
    return driver_files.file_at(StorageConfig(options=dict(storage_options or {})), uri)


@contextmanager
def _store_errors(location: str, where: backend.Location, doing: str) -> Iterator[None]:
    """The object store's failures named by ``location``, with no credential in the message (nor in
    the chained cause when the original text held one), as `backend.storage_errors` does."""
    failures = driver_files.store_errors()
    try:
        yield
    except FileNotFoundError:
        raise FlinkCheckpointGoneError(location, "the file does not exist (any more)") from None
    except failures as exc:
        text = str(exc)
        clean = backend.scrub(text, where.secrets)
        error = InfrastructureError(f"{location}: cannot {doing}: {clean}")
        if backend.scrub(text, []) != clean:
            raise error from None
        raise error from exc


def _read_object(
    location: str, storage_options: Mapping[str, str] | None, start: int, length: int | None
) -> bytes:
    files, path, where = _store(location, storage_options)
    with _store_errors(location, where, "be read"):
        if files.get_file_info(path).type != fs.FileType.File:
            raise FileNotFoundError(location)
        with files.open_input_file(path) as handle:
            size = handle.size()
            if start >= size:
                return b""
            return bytes(handle.read_at(_span(size, start, length), start))


def _span(size: int, start: int, length: int | None) -> int:
    return size - start if length is None else min(length, size - start)


def read_bytes(
    location: str,
    storage_options: Mapping[str, str] | None = None,
    start: int = 0,
    length: int | None = None,
) -> bytes:
    """The bytes of ``location`` (``length`` bytes from ``start`` when given)."""
    local = local_path(location)
    if local is None:
        data = _read_object(location, storage_options, start, length)
        if length is not None and len(data) != length:
            raise FlinkStateError(location, f"truncated: {len(data)} of {length} bytes from byte {start}")
        return data
    try:
        with local.open("rb") as handle:
            if start:
                handle.seek(start)
            data = handle.read() if length is None else handle.read(length)
    except FileNotFoundError as exc:
        raise FlinkCheckpointGoneError(location, "the file does not exist (any more)") from exc
    except IsADirectoryError as exc:
        raise FlinkStateError(location, "is a directory, not a checkpoint file") from exc
    except OSError as exc:
        raise InfrastructureError(f"{location}: cannot be read: {exc}") from exc
    if length is not None and len(data) != length:
        raise FlinkStateError(location, f"truncated: {len(data)} of {length} bytes from byte {start}")
    return data


def list_objects(location: str, storage_options: Mapping[str, str] | None = None) -> list[StoredFile]:
    """Every object under the S3 directory ``location``, at any depth (an object store lists keys,
    not directories: one listing finds a root's checkpoints); empty when there is none."""
    files, path, where = _store(location, storage_options)
    with _store_errors(location, where, "be listed"):
        listed = files.get_file_info(fs.FileSelector(path, allow_not_found=True, recursive=True))
    prefix = f"{path}/" if path else ""
    return [
        StoredFile(info.path.removeprefix(prefix), _epoch_ms(info.mtime))
        for info in listed
        if info.type == fs.FileType.File and info.path.startswith(prefix)
    ]


def object_modified_ms(location: str, storage_options: Mapping[str, str] | None = None) -> int | None:
    """When the S3 object ``location`` was last written, None when it does not exist."""
    files, path, where = _store(location, storage_options)
    with _store_errors(location, where, "be read"):
        info = files.get_file_info(path)
    return _epoch_ms(info.mtime) if info.type == fs.FileType.File else None


def _epoch_ms(when: datetime | None) -> int:
    return 0 if when is None else int(when.timestamp() * 1000)
