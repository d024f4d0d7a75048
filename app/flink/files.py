"""Where a checkpoint's files are and how their bytes are read: the decoder's only I/O.

Locations are strings as Flink writes them: a plain path, or a URI (``file:/x``, ``file:///x``).
Local files only for now; an object store (``s3a://``) is one more branch of ``read_bytes`` (for
example through ``pyarrow.fs`` with ``storage_options``), with nothing else to change.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from app.errors import FlinkCheckpointGoneError, FlinkStateError, InfrastructureError

METADATA_FILE_NAME: Final = "_metadata"


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


def read_bytes(
    location: str,
    storage_options: Mapping[str, str] | None = None,
    start: int = 0,
    length: int | None = None,
) -> bytes:
    """The bytes of ``location`` (``length`` bytes from ``start`` when given)."""
    del storage_options  # for object stores; a local file needs none
    local = local_path(location)
    if local is None:
        raise FlinkStateError(
            location, "only local checkpoints can be read so far (file system not supported)"
        )
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
