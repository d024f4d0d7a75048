"""A Flink job followed from inside a long-lived process: the sidecar of `flink-watch`, built once
(`open_sidecar`, which `audit.watch_flink_job` uses too), polling in a thread of its own.

`watch` follows its Flink jobs this way: a cycle every ``--interval`` seconds is far too rare for
Flink, which deletes a checkpoint's files as later ones complete (it keeps
`execution.checkpointing.num-retained`), so the sidecar's poll runs every ``poll_s`` in a
`FlinkFollower` thread, keeping its state (the run, the last checkpoint handled) between polls as
`flink-watch` does, and a cycle only waits until a poll that began after it asked has ended
(`FlinkFollower.caught_up`): what Flink completed before the cycle is then in the ledger. Each
follower has its own `FlinkRest`, so its REST load stays within that client's pacer.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from app.config import KafkaConfig, StorageConfig
from app.errors import FlinkRestError, UsageError, describe_error
from app.flink.metadata import read_checkpoint
from app.flink.positions import BrokerPositions
from app.flink.prefetch import Prefetcher
from app.flink.rest import FlinkRest
from app.flink.watcher import DEFAULT_POLL_S, FlinkLedger, FlinkWatcher
from app.runtime.signals import StopSignal

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 60.0  # a poll in progress (a Delta commit) ends within this at a stop


@dataclass(frozen=True)
class SidecarSettings:
    """What a sidecar follows and where it writes (the arguments of `audit.watch_flink_job`)."""

    rest: str
    job_name: str
    ledger: str
    flink_job_id: str | None = None
    flink_job_name: str | None = None
    group_id: str | None = None
    poll_s: float = DEFAULT_POLL_S
    startup_mode: str | None = None
    startup_key: str | None = None
    kafka: KafkaConfig | None = None
    bootstrap: str | None = None
    storage_options: Mapping[str, str] | None = None


class Sidecar:
    """A watcher and what it holds open: the read-ahead thread and the broker consumer."""

    def __init__(
        self, watcher: FlinkWatcher, prefetch: Prefetcher, positions: BrokerPositions | None
    ) -> None:
        self.watcher = watcher
        self.prefetch = prefetch
        self.positions = positions

    def close(self) -> None:
        self.prefetch.close()
        if self.positions is not None:
            self.positions.close()


def open_sidecar(settings: SidecarSettings) -> Sidecar:
    """The watcher of ``settings`` with its read-ahead started (and, with a bootstrap, the consumer
    that asks where a run without state started). Close it."""
    options = settings.storage_options
    positions = (
        None
        if settings.bootstrap is None
        else BrokerPositions(settings.kafka or KafkaConfig(), settings.bootstrap)
    )
    prefetch = Prefetcher(lambda path: read_checkpoint(path, options)).start()
    watcher = FlinkWatcher(
        FlinkRest(settings.rest),
        FlinkLedger(StorageConfig(options=dict(options or {})), settings.ledger, settings.job_name),
        flink_job_id=settings.flink_job_id,
        flink_job_name=settings.flink_job_name,
        group_id=settings.group_id,
        poll_s=settings.poll_s,
        startup_mode=settings.startup_mode,
        startup_key=settings.startup_key,
        positions=positions,
        storage_options=options,
        prefetch=prefetch,
    )
    return Sidecar(watcher, prefetch, positions)


class FlinkFollower:
    """One sidecar polling every ``poll_s`` in its own thread until `close` (or the end of the
    followed job id). Its first contact is made in the thread too, tried again every ``poll_s``
    while the JobManager does not answer (a watch may start before its Flink job). A poll that
    fails (a ledger write) is logged and tried again at the next poll: the watcher moves past a
    checkpoint only once it is written. An unknown job id ends the follower with its UsageError."""

    def __init__(self, sidecar: Sidecar, name: str) -> None:
        self.sidecar = sidecar
        self.name = name
        self.stop = StopSignal()  # never installed: `close` asks it from the owner's thread
        self._changed = threading.Condition()
        self._begun = 0  # polls begun (first contacts included)
        self._done = 0  # polls ended
        self._ended = False  # the followed job id ended, the follower failed for good, or it was closed
        self._connected = False  # the first contact was made
        self._error: str | None = None  # the last poll's failure, None when it succeeded
        self._usage: UsageError | None = None  # what ended it: the job id is unknown
        self._thread: threading.Thread | None = None

    @property
    def connected(self) -> bool:
        with self._changed:
            return self._connected

    @property
    def error(self) -> str | None:
        with self._changed:
            return self._error

    @property
    def usage_error(self) -> UsageError | None:
        with self._changed:
            return self._usage

    def start(self) -> FlinkFollower:
        self._thread = threading.Thread(target=self._follow, name=f"flink-follower-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _follow(self) -> None:
        watcher = self.sidecar.watcher
        ended = False
        unreachable_told = False
        while not ended and self.stop.requested is None:
            began = time.monotonic()
            with self._changed:
                self._begun += 1
            error = usage = None
            try:
                if not self._connected:
                    watcher.start(0.0, self.stop)  # the retention warnings are logged there
                    with self._changed:
                        self._connected = True
                    log.info("following Flink job %s at %s", self.name, watcher.rest.base_url)
                ended = watcher.poll_once()
            except FlinkRestError as exc:  # only from the first contact: later outages are the poll's
                if not unreachable_told:
                    log.warning(
                        "Flink job %s not reachable yet, tried every %.1f s: %s",
                        self.name,
                        watcher.poll_s,
                        exc,
                    )
                    unreachable_told = True
            except UsageError as exc:
                usage, error, ended = exc, describe_error(exc), True
                log.error("follower of Flink job %s: %s", self.name, error)
            except Exception as exc:  # broad on purpose: a failed poll is retried, the thread lives on
                error = describe_error(exc)
                log.error("follower of Flink job %s: a poll failed: %s", self.name, error)
                log.debug("follower of Flink job %s: poll failed", self.name, exc_info=True)
            with self._changed:
                self._done += 1
                self._error, self._usage, self._ended = error, usage, ended
                self._changed.notify_all()
            if not ended:
                self.stop.wait(watcher.poll_s - (time.monotonic() - began))
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def caught_up(self, timeout_s: float) -> bool:
        """Waits until a poll that began after this call has ended, or the follower ended: what
        Flink completed before the call is then in the ledger (or recorded as missed). False after
        ``timeout_s`` without one."""
        with self._changed:
            wanted = self._begun + 1
            return self._changed.wait_for(lambda: self._done >= wanted or self._ended, timeout_s)

    def close(self) -> None:
        """Stops the thread at its next boundary (a poll in progress ends first) and the sidecar."""
        self.stop.request(signal.SIGTERM)
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning(
                    "follower of Flink job %s still in a poll after %.0f s", self.name, JOIN_TIMEOUT_S
                )
        self.sidecar.close()
