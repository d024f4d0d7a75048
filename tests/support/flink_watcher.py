"""The sidecar's scripted world: a clock, a JobManager's REST documents and decoded checkpoint files
a test changes between polls, the watcher wired to them, and the ledger rows it wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from app.config import StorageConfig
from app.contracts import vocabulary as vocab
from app.errors import FlinkCheckpointGoneError, FlinkRestError
from app.flink.metadata import FlinkCheckpointOffsets, SplitOffset
from app.flink.rest import FlinkRest, Pacer
from app.flink.watcher import FlinkLedger, FlinkWatcher

JOB_A = "4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4"
JOB_B = "9e8d7c6b5a4f30e2d1c0b9a8f7e6d5c4"
T0 = 1764237600000


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeStop:
    """Between polls, the clock moves by the poll interval; no real sleep."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.requested: int | None = None

    def wait(self, timeout_s: float) -> bool:
        self.clock.now += max(timeout_s, 0.0)
        return self.requested is not None


class FakeFlink:
    """A JobManager's REST documents, changed by the test between polls, and the decoded checkpoint
    files it would have written (a path absent from ``files`` is deleted)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.jobs: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.restored: dict[str, dict[str, Any] | None] = {}
        self.files: dict[str, FlinkCheckpointOffsets] = {}
        self.down = False
        self.requests: list[tuple[float, str]] = []
        self.config = [{"key": "execution.checkpointing.num-retained", "value": "3"}]
        self.params: dict[str, dict[str, str]] = {}  # a job's published parameters (user-config)
        self.commit_counts: dict[str, tuple[int, int]] = {}  # its source's (commitsFailed, commitsSucceeded)
        self.history_size: int | None = None  # web.checkpoints.history: how many the REST API lists
        self.completed_before: dict[str, int] = {}  # a job's completed checkpoints before the test's first

    def submit(self, job_id: str, start_ms: int, name: str = "payments") -> None:
        self.jobs[job_id] = {
            "jid": job_id,
            "name": name,
            "state": "RUNNING",
            "start-time": start_ms,
            "end-time": -1,
            "vertices": [
                {"id": "cbc357ccb763df2852fee8c4fc7d55f2", "name": "Source: kafka-source -> discard: Writer"}
            ],
        }
        self.history[job_id] = []
        self.restored[job_id] = None

    def restore(self, job_id: str, checkpoint_id: int, at_ms: int, savepoint: bool = False) -> None:
        self.restored[job_id] = {
            "id": checkpoint_id,
            "restore_timestamp": at_ms,
            "is_savepoint": savepoint,
            "external_path": f"file:/cp/{job_id}/chk-{checkpoint_id}",
        }

    def complete(
        self, job_id: str, checkpoint_id: int, trigger_ms: int, offsets: dict[tuple[str, int], int]
    ) -> None:
        path = f"file:/cp/{job_id}/chk-{checkpoint_id}"
        self.history[job_id].append(
            {
                "id": checkpoint_id,
                "status": "COMPLETED",
                "is_savepoint": False,
                "trigger_timestamp": trigger_ms,
                "latest_ack_timestamp": trigger_ms + 40,
                "external_path": path,
                "discarded": False,
            }
        )
        splits = tuple(SplitOffset(t, p, o, None) for (t, p), o in sorted(offsets.items()))
        self.files[path] = FlinkCheckpointOffsets(
            checkpoint_id, vocab.ENGINE_FLINK_KAFKASOURCE, "src", f"/cp/{job_id}/chk-{checkpoint_id}", splits
        )

    # The ids a real Flink 1.20 MiniCluster lists for a KafkaSource named kafka-source.
    FAILED_ID = "Source__kafka-source.KafkaSourceReader.commitsFailed"
    SUCCEEDED_ID = "Source__kafka-source.KafkaSourceReader.commitsSucceeded"

    def metrics_document(self, job_id: str, path: str) -> Any:
        """A source vertex's metric list, or its commit counters summed over subtasks."""
        if job_id not in self.commit_counts:
            return []  # the reader has not registered its metrics
        if "?get=" not in path:
            return [
                {"id": "Source__kafka-source.numRecordsOut"},
                {"id": self.FAILED_ID},
                {"id": self.SUCCEEDED_ID},
            ]
        failed, succeeded = self.commit_counts[job_id]
        wanted = path.split("?get=", 1)[1].split("&", 1)[0].split(",")
        values = {self.FAILED_ID: failed, self.SUCCEEDED_ID: succeeded}
        return [{"id": i, "sum": float(values[i])} for i in wanted if i in values]

    def fail(self, job_id: str, checkpoint_id: int, trigger_ms: int) -> None:
        self.history[job_id].append(
            {"id": checkpoint_id, "status": "FAILED", "is_savepoint": False, "trigger_timestamp": trigger_ms}
        )

    def end(self, job_id: str, state: str, at_ms: int) -> None:
        self.jobs[job_id].update({"state": state, "end-time": at_ms})

    def read(self, path: str) -> FlinkCheckpointOffsets:
        if path not in self.files:
            raise FlinkCheckpointGoneError(f"{path}/_metadata", "the file does not exist (any more)")
        return self.files[path]

    def opener(self, url: str, timeout_s: float) -> bytes:
        self.requests.append((self.clock.now, url))
        if self.down:
            raise FlinkRestError(f"Flink REST API unreachable at {url}: Connection refused")
        path = url.split("8081", 1)[1]
        parts = path.strip("/").split("/")
        body: Any
        if "/vertices/" in path:
            body = self.metrics_document(parts[1], path)
        elif path == "/jobs/overview":
            body = {"jobs": list(self.jobs.values())}
        elif path == "/jobmanager/config" or path.endswith("/jobmanager/config"):
            body = self.config
        elif path.endswith("/config") and len(parts) == 3:
            body = {"jid": parts[1], "execution-config": {"user-config": self.params.get(parts[1], {})}}
        elif path.endswith("/checkpoints/config"):
            body = {"interval": 1000, "externalization": {"enabled": True, "delete_on_cancellation": False}}
        elif path.endswith("/checkpoints"):
            history = self.history[parts[1]]
            body = {
                "counts": {
                    "completed": sum(1 for h in history if h["status"] == "COMPLETED")
                    + self.completed_before.get(parts[1], 0),
                    "failed": sum(1 for h in history if h["status"] == "FAILED"),
                },
                "latest": {"restored": self.restored[parts[1]]},
                # newest first, as Flink lists it; the counts are the job's, listed or not
                "history": list(reversed(history))[: self.history_size],
            }
        else:
            from app.flink.rest import FlinkRestHttpError

            if parts[1] not in self.jobs:
                raise FlinkRestHttpError(url, 404)
            body = self.jobs[parts[1]]
        return json.dumps(body).encode()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def flink(clock: FakeClock) -> FakeFlink:
    return FakeFlink(clock)


def watcher(flink: FakeFlink, ledger: Path, clock: FakeClock, **kwargs: Any) -> FlinkWatcher:
    rest = FlinkRest(
        "http://127.0.0.1:8081", pacer=Pacer(2.0, clock=clock, sleep=clock.sleep), opener=flink.opener
    )
    kwargs.setdefault("flink_job_id", JOB_A)
    return FlinkWatcher(
        rest,
        FlinkLedger(StorageConfig(), str(ledger), "payments"),
        group_id="payments-group",
        read=flink.read,
        clock=clock,
        **kwargs,
    )


def rows(ledger: Path) -> list[dict[str, Any]]:
    table = DeltaTable(str(ledger)).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: (r["event_time"], r["event_type"], r["partition"] or -1))


def of(ledger: Path, event_type: str, run_id: str | None = None) -> list[dict[str, Any]]:
    return [
        r for r in rows(ledger) if r["event_type"] == event_type and (run_id is None or r["run_id"] == run_id)
    ]
