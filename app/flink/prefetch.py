"""Read a running job's checkpoints as soon as their files appear, before Flink deletes them.

Flink keeps only `execution.checkpointing.num-retained` checkpoints on disk; the REST API says a
checkpoint completed only when the sidecar asks, and a busy JobManager can take seconds to answer.
A checkpoint's `_metadata` is in place once it completed (Flink writes it last), so a thread lists the
job's checkpoint directory every ``scan_s`` and decodes each new `chk-N` at once; the sidecar's loop,
which learns from REST what completed and when, takes the decoded offsets from here and reads a file
itself only when this thread did not. Local directories only; a failed read is not kept (the loop
reads again and names the failure).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from typing import Final

from app.errors import OffsetAuditError
from app.flink.metadata import FlinkCheckpointOffsets

log = logging.getLogger(__name__)

CHECKPOINT_DIR: Final = re.compile(r"^chk-(\d+)$")
METADATA: Final = "_metadata"
DEFAULT_SCAN_S: Final = 0.2


def local_dir(location: str) -> str | None:
    """The local directory a `file:` URI or plain path names; None for another file system."""
    if location.startswith("file://"):
        location = location[len("file://") :]
    elif location.startswith("file:"):
        location = location[len("file:") :]
    if "://" in location:
        return None
    return os.path.normpath(location)


class Prefetcher:
    """A daemon thread decoding each new `chk-N` of one directory (`watch`), kept until `take`n."""

    def __init__(self, read: Callable[[str], FlinkCheckpointOffsets], scan_s: float = DEFAULT_SCAN_S) -> None:
        self.read = read
        self.scan_s = scan_s
        self._lock = threading.Lock()
        self._directory: str | None = None
        self._floor = 0
        self._found: dict[str, FlinkCheckpointOffsets] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Prefetcher:
        self._thread = threading.Thread(target=self._run, name="flink-prefetch", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def watch(self, directory: str | None, floor: int) -> None:
        """Scan ``directory`` (a job's checkpoint directory) for checkpoints above ``floor``.

        What was read of the previous directory stays until taken or forgotten: when a killed job
        is resubmitted from its checkpoint, the sidecar recovers the dead job's last checkpoints
        from it, though Flink deleted their files since (`watcher.FlinkWatcher._recover`)."""
        local = None if directory is None else local_dir(directory)
        with self._lock:
            self._directory = local
            self._floor = floor

    def forget_through(self, checkpoint_id: int) -> None:
        """The loop handled every checkpoint up to ``checkpoint_id``: what is left of them goes."""
        with self._lock:
            self._floor = max(self._floor, checkpoint_id)
            for key in [k for k, v in self._found.items() if v.checkpoint_id <= checkpoint_id]:
                del self._found[key]

    def take(self, external_path: str) -> FlinkCheckpointOffsets | None:
        """The decoded offsets of the checkpoint at ``external_path``, if this thread read them."""
        local = local_dir(external_path)
        if local is None:
            return None
        with self._lock:
            return self._found.pop(local, None)

    def scan_once(self) -> int:
        """Decode the directory's new checkpoints; how many were read."""
        with self._lock:
            directory, floor = self._directory, self._floor
            known = set(self._found)
        if directory is None:
            return 0
        try:
            names = os.listdir(directory)
        except OSError:
            return 0  # not created yet (no checkpoint so far), or gone with the job
        fresh = []
        for name in names:
            match = CHECKPOINT_DIR.match(name)
            path = os.path.join(directory, name)
            if match and int(match.group(1)) > floor and path not in known:
                fresh.append((int(match.group(1)), path))
        read = 0
        for _, path in sorted(fresh):
            if not os.path.exists(os.path.join(path, METADATA)):
                continue  # still being written
            try:
                decoded = self.read(path)
            except (OffsetAuditError, OSError) as exc:
                log.debug("flink-watch: %s not read ahead: %s", path, exc)
                continue
            with self._lock:
                if self._directory == directory and decoded.checkpoint_id > self._floor:
                    self._found[path] = decoded
            read += 1
        return read

    def _run(self) -> None:
        while not self._stop.wait(self.scan_s):
            try:
                self.scan_once()
            except Exception:  # broad on purpose: the thread must outlive any surprise, the loop reads anyway
                log.exception("flink-watch: reading ahead failed")
