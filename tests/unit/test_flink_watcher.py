"""The sidecar loop against a scripted JobManager (its REST documents), a scripted decoder and a real
Delta ledger on local disk: what it records, misses, restarts and stops, and its request pace."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from app.config import StorageConfig
from app.contracts import vocabulary as vocab
from app.contracts.offsets import KAFKASOURCE_COMMITTED_OFFSET as KAFKASOURCE_COMMITTED
from app.contracts.offsets import EventSource, LedgerEvent
from app.errors import FlinkRestError, UsageError
from app.flink.metadata import read_checkpoint
from app.flink.rest import (
    CommitCounts,
    CommitMetrics,
    commit_metric_ids,
    parse_commit_counts,
)
from app.flink.watcher import MAX_NAMED_UNREAD, FlinkLedger, FlinkWatcher, unread
from app.reconcile import findings as rc
from app.reconcile.ledger import audit as la
from app.reconcile.ledger import commit_rules
from app.stream.recorder import RunRecorder
from tests.support import ledger_data
from tests.support.flink_watcher import (
    JOB_A,
    JOB_B,
    T0,
    FakeClock,
    FakeFlink,
    FakeStop,
    clock,
    flink,
    of,
    rows,
    watcher,
)
from tests.support.ledger_data import commits_table

pytestmark = pytest.mark.unit

__all__ = ["clock", "flink"]  # fixtures from tests/support, found by the tests here

RULES = rc.MatchRules(commit_match_window_s=60, clock_skew_s=1)


def retained_checkpoint(root: Path, job: str, checkpoint_id: int, offset: int) -> str:
    """A retained `chk-N` of ``job`` under ``root``/cp holding orders-0 at ``offset``, as Flink
    writes it (decoded by the real decoder): its external path."""
    from tests.unit import flink_bytes as fb

    chk = root / "cp" / job / f"chk-{checkpoint_id}"
    chk.mkdir(parents=True)
    (chk / "_metadata").write_bytes(fb.kafka_source_checkpoint(4, checkpoint_id, [[("orders", 0, offset)]]))
    return f"file:{chk}"


def test_every_completed_checkpoint_is_recorded_once_and_the_end_of_the_job_stops_the_run(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock)
    assert w.start() == []
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10, ("orders", 1): 7})
    assert not w.poll_once()
    flink.fail(JOB_A, 2, T0 + 2000)
    flink.complete(JOB_A, 3, T0 + 3000, {("orders", 0): 25, ("orders", 1): 19})
    assert not w.poll_once()
    assert not w.poll_once()  # nothing new: nothing written
    flink.complete(JOB_A, 4, T0 + 4000, {("orders", 0): 30, ("orders", 1): 19})
    flink.end(JOB_A, "CANCELED", T0 + 4500)

    assert w.poll_once()  # the followed job id ended

    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert sorted({r["checkpoint_id"] for r in completed}) == [1, 3, 4]
    assert len(completed) == 6
    assert len(of(ledger, vocab.EVENT_CHECKPOINT_SNAPSHOT)) == 6
    assert {(r["checkpoint_id"], r["partition"]): r["offset"] for r in completed}[(3, 0)] == 25
    assert len(of(ledger, vocab.EVENT_COMMIT_REQUESTED)) == 6
    assert len(of(ledger, vocab.EVENT_RUN_STARTED)) == 1
    stopped = of(ledger, vocab.EVENT_RUN_STOPPED)
    assert len(stopped) == 1
    detail = json.loads(stopped[0]["detail"])
    assert detail[vocab.DETAIL_REASON] == "canceled"
    assert (detail["checkpoints_recorded"], detail[vocab.DETAIL_FAILED_CHECKPOINTS]) == (3, 1)
    assert detail[vocab.DETAIL_MISSED_CHECKPOINTS] == []
    before = len(rows(ledger))

    # A sidecar started again over the same history writes nothing twice.
    again = watcher(flink, ledger, clock)
    again.start()
    assert again.poll_once()
    assert len(rows(ledger)) == before


def test_a_checkpoint_whose_files_are_gone_is_named_missed_and_claims_no_offsets(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10})
    flink.complete(JOB_A, 2, T0 + 2000, {("orders", 0): 20})
    del flink.files[f"file:/cp/{JOB_A}/chk-1"]  # Flink deleted it before the poll
    w.poll_once()
    flink.complete(JOB_A, 3, T0 + 3000, {("orders", 0): 30})
    flink.end(JOB_A, "FINISHED", T0 + 3500)
    w.poll_once()

    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED)
    assert sorted(r["checkpoint_id"] for r in completed) == [2, 3]
    assert not [
        r for r in rows(ledger) if r["checkpoint_id"] == 1 and r["event_type"] != vocab.EVENT_RUN_STARTED
    ]
    named = json.loads(next(r for r in completed if r["checkpoint_id"] == 2)["detail"])
    assert [(m["id"], m[vocab.DETAIL_REASON]) for m in named[vocab.DETAIL_MISSED_CHECKPOINTS]] == [
        (1, vocab.MISSED_FILES_GONE)
    ]
    assert vocab.DETAIL_MISSED_CHECKPOINTS not in json.loads(
        next(r for r in completed if r["checkpoint_id"] == 3)["detail"]
    )
    stopped = json.loads(of(ledger, vocab.EVENT_RUN_STOPPED)[0]["detail"])
    assert [m["id"] for m in stopped[vocab.DETAIL_MISSED_CHECKPOINTS]] == [1]
    assert w.summary.missed == [
        {
            "id": 1,
            vocab.DETAIL_REASON: vocab.MISSED_FILES_GONE,
            vocab.DETAIL_MESSAGE: f"file:/cp/{JOB_A}/chk-1/_metadata: the file does not exist (any more)",
        }
    ]


def test_an_undecodable_checkpoint_is_named_unreadable(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    chk = tmp_path / "cp" / "chk-1"
    chk.mkdir(parents=True)
    (chk / "_metadata").write_bytes(b"\x00garbage")
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock)
    w.read = read_checkpoint  # the real decoder, on a file that is there but no checkpoint
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10})
    flink.history[JOB_A][0]["external_path"] = f"file:{chk}"
    w.poll_once()

    assert w.summary.missed[0][vocab.DETAIL_REASON] == vocab.MISSED_UNREADABLE
    assert str(chk / "_metadata") in str(w.summary.missed[0][vocab.DETAIL_MESSAGE])
    assert of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED) == []


def test_a_failover_starts_a_new_run_from_the_restored_checkpoint(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10})
    w.poll_once()
    # Between two polls: checkpoint 2 completes, a task fails, the job restores checkpoint 2.
    flink.complete(JOB_A, 2, T0 + 2000, {("orders", 0): 20})
    flink.restore(JOB_A, 2, T0 + 2600)
    flink.complete(JOB_A, 3, T0 + 3000, {("orders", 0): 28})
    w.poll_once()

    second = f"{JOB_A}-restore-2-{T0 + 2600}"
    assert w.summary.runs == [JOB_A, second]
    assert sorted(r["checkpoint_id"] for r in of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)) == [1, 2]
    assert [r["checkpoint_id"] for r in of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, second)] == [3]
    restored = of(ledger, vocab.EVENT_OFFSETS_RESTORED, second)
    assert [(r["offset"], r["checkpoint_id"]) for r in restored] == [(20, 2)]
    assert json.loads(restored[0]["detail"])[vocab.DETAIL_SOURCE] == vocab.RESTORE_CHECKPOINT
    # The dead attempt stopped without RUN_STOPPED: reconcile judges it (UNCLEAN_STOP) with the restart.
    assert of(ledger, vocab.EVENT_RUN_STOPPED) == []


def test_a_resubmission_after_a_crash_records_the_restored_checkpoint_the_ledger_lacked(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock, flink_job_id=None, flink_job_name="payments")
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10})
    w.poll_once()
    # Checkpoint 2 completes and the whole Flink process is killed before the next poll.
    flink.complete(JOB_A, 2, T0 + 2000, {("orders", 0): 20})
    flink.down = True
    assert not w.poll_once()  # retried, not fatal
    # A new process: the job resubmitted from chk-2 under a new job id, seen first while it is
    # still being created (before it restored anything), then running.
    flink.down = False
    chk2 = flink.files[f"file:/cp/{JOB_A}/chk-2"]
    flink.jobs.clear()
    flink.submit(JOB_B, T0 + 5000)
    flink.jobs[JOB_B]["state"] = "INITIALIZING"
    w.poll_once()
    assert w.summary.runs == [JOB_A]
    flink.jobs[JOB_B]["state"] = "RUNNING"
    flink.restore(JOB_B, 2, T0 + 5200)
    flink.files[f"file:/cp/{JOB_B}/chk-2"] = chk2
    flink.complete(JOB_B, 3, T0 + 6000, {("orders", 0): 31})
    w.poll_once()

    second = f"{JOB_B}-restore-2-{T0 + 5200}"
    assert w.summary.runs == [JOB_A, second]
    recovered = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert sorted(r["checkpoint_id"] for r in recovered) == [1, 2]
    chk2_row = next(r for r in recovered if r["checkpoint_id"] == 2)
    assert json.loads(chk2_row["detail"])[vocab.DETAIL_RECOVERED] is True
    # As a Spark run's recovered events do, they name the run that rebuilt them.
    assert json.loads(chk2_row["detail"])[vocab.DETAIL_RECOVERED_BY] == f"{JOB_B}-restore-2-{T0 + 5200}"
    assert [r["offset"] for r in of(ledger, vocab.EVENT_OFFSETS_RESTORED, second)] == [20]
    assert [r["checkpoint_id"] for r in of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, second)] == [3]
    assert (
        json.loads(of(ledger, vocab.EVENT_RUN_STARTED, second)[0]["detail"])[vocab.DETAIL_FLINK_JOB_ID]
        == JOB_B
    )


def test_the_loop_sends_at_most_two_requests_a_second(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    flink.submit(JOB_A, T0)
    w = watcher(flink, tmp_path / "ledger", clock, flink_job_id=None, flink_job_name="payments", poll_s=0.2)
    w.start()
    for i in range(1, 30):
        flink.complete(JOB_A, i, T0 + 1000 * i, {("orders", 0): 10 * i})
        w.poll_once()

    times = [t for t, _ in flink.requests]
    assert len(times) > 60
    assert all(b - a >= 0.5 - 1e-9 for a, b in itertools.pairwise(times))


def test_the_follow_loop_ends_at_the_stop_and_at_the_end_of_a_followed_id(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    flink.submit(JOB_A, T0)
    w = watcher(flink, tmp_path / "ledger", clock)
    w.start()
    stop = FakeStop(clock)
    summary = w.follow(stop, max_polls=3)
    assert summary.rest_requests > 0
    assert summary.stopped_runs == []

    flink.end(JOB_A, "FAILED", T0 + 9000)
    summary = w.follow(stop)  # no bound: the end of the job ends it
    assert summary.stopped_runs == [JOB_A]


def test_an_unknown_job_id_is_a_usage_error_and_an_unreachable_jobmanager_an_infrastructure_one(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match=JOB_A):
        watcher(flink, tmp_path / "ledger", clock).start()
    flink.down = True
    with pytest.raises(FlinkRestError):
        watcher(flink, tmp_path / "ledger", clock).start()


def test_every_new_checkpoint_is_read_before_the_first_write(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    """A Delta commit is slower than a decode: while the first checkpoint of a poll is written,
    Flink completes more and deletes the older files. Reading them all first loses none."""

    class SlowRecorder(RunRecorder):
        def batch(self, batch_id: int, events: Sequence[LedgerEvent]) -> bool:
            # Meanwhile Flink retained only the newest checkpoint.
            for path in [p for p in flink.files if not p.endswith("chk-3")]:
                del flink.files[path]
            return super().batch(batch_id, events)

    class SlowLedger(FlinkLedger):
        def recorder(self, source: EventSource) -> RunRecorder:
            return SlowRecorder(self.writer(source.run_id), source)

    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock)
    w.ledger = SlowLedger(StorageConfig(), str(ledger), "payments")
    w.start()
    for i in (1, 2, 3):
        flink.complete(JOB_A, i, T0 + 1000 * i, {("orders", 0): 10 * i})
    w.poll_once()

    assert w.summary.missed == []
    assert sorted({r["checkpoint_id"] for r in of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED)}) == [1, 2, 3]


def test_a_sidecar_started_beside_its_jobmanager_waits_for_the_rest_api_within_its_bound(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    flink.submit(JOB_A, T0)
    flink.down = True

    class UpAfterThreeWaits(FakeStop):
        waits = 0

        def wait(self, timeout_s: float) -> bool:
            self.waits += 1
            flink.down = self.waits < 3
            return super().wait(timeout_s)

    w = watcher(flink, tmp_path / "ledger", clock)
    assert w.start(wait_s=30.0, stop=UpAfterThreeWaits(clock)) == []
    flink.down = True
    with pytest.raises(FlinkRestError):
        watcher(flink, tmp_path / "ledger", clock).start(wait_s=5.0, stop=FakeStop(clock))


def test_a_checkpoint_read_ahead_from_its_directory_is_recorded_though_flink_deleted_it_before_the_poll(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    from app.flink.prefetch import Prefetcher
    from tests.unit import flink_bytes as fb

    root = tmp_path / "checkpoints"
    flink.config.append({"key": "execution.checkpointing.dir", "value": f"file:{root}"})
    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0)
    prefetch = Prefetcher(read_checkpoint)  # scanned by hand below: no thread, no timing
    w = watcher(flink, ledger, clock, prefetch=prefetch)
    w.read = read_checkpoint
    w.start()
    w.poll_once()  # the job is followed: its directory is scanned from now on
    chk = root / JOB_A / "chk-1"
    chk.mkdir(parents=True)
    (chk / "_metadata").write_bytes(
        fb.kafka_source_checkpoint(4, 1, [[("orders", 0, 41)], [("orders", 1, 17)]])
    )
    assert prefetch.scan_once() == 1
    flink.complete(JOB_A, 1, T0 + 1000, {})
    flink.history[JOB_A][-1]["external_path"] = f"file:{chk}"
    (chk / "_metadata").unlink()  # Flink retained newer ones before the REST API answered

    w.poll_once()

    assert w.summary.missed == []
    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED)
    assert sorted((r["checkpoint_id"], r["partition"], r["offset"]) for r in completed) == [
        (1, 0, 41),
        (1, 1, 17),
    ]
    assert prefetch.take(f"file:{chk}") is None  # taken once, then forgotten


def test_without_the_read_ahead_the_same_checkpoint_is_named_missed(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    flink.submit(JOB_A, T0)
    w = watcher(flink, tmp_path / "ledger", clock)
    w.read = read_checkpoint
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {})
    flink.history[JOB_A][-1]["external_path"] = f"file:{tmp_path / 'gone' / 'chk-1'}"

    w.poll_once()

    assert [m[vocab.DETAIL_REASON] for m in w.summary.missed] == [vocab.MISSED_FILES_GONE]


def test_checkpoints_completed_between_the_last_poll_and_a_kill_are_recovered_from_their_files(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    def retained(job: str, checkpoint_id: int, offset: int) -> str:
        return retained_checkpoint(tmp_path, job, checkpoint_id, offset)

    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0, name="payments")
    w = watcher(flink, ledger, clock, flink_job_id=None, flink_job_name="payments")
    w.read = read_checkpoint
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {})
    flink.history[JOB_A][-1]["external_path"] = retained(JOB_A, 1, 10)
    w.poll_once()
    # Checkpoints 2 and 3 complete, and the process is killed before the next poll saw them.
    retained(JOB_A, 2, 20)
    restored = retained(JOB_A, 3, 30)
    flink.jobs.clear()
    flink.submit(JOB_B, T0 + 9000, name="payments")
    flink.restore(JOB_B, 3, T0 + 9500)
    flink.restored[JOB_B]["external_path"] = restored  # type: ignore[index]
    w.poll_once()

    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert sorted((r["checkpoint_id"], r["offset"]) for r in completed) == [(1, 10), (2, 20), (3, 30)]
    assert [
        json.loads(r["detail"]).get(vocab.DETAIL_RECOVERED)
        for r in sorted(completed, key=lambda r: r["checkpoint_id"])
    ] == [None, True, True]
    restarted = of(ledger, vocab.EVENT_OFFSETS_RESTORED)
    assert [(r["checkpoint_id"], r["offset"]) for r in restarted] == [(3, 30)]


def test_at_a_stop_with_the_rest_api_gone_the_jobs_last_checkpoints_are_read_from_its_directory(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    """A job cancelled (its process, and REST API, gone with it) moments after a checkpoint the sidecar
    had not polled yet: Flink committed that checkpoint, so the sidecar records it, and its commit
    request, from the retained files at its stop; without this the commit would be foreign."""

    def retained(checkpoint_id: int, offset: int) -> str:
        return retained_checkpoint(tmp_path, JOB_A, checkpoint_id, offset)

    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0, name="payments")
    w = watcher(flink, ledger, clock, flink_job_id=None, flink_job_name="payments")
    w.read = read_checkpoint
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {})
    flink.history[JOB_A][-1]["external_path"] = retained(1, 10)
    w.poll_once()
    retained(2, 20)
    retained(3, 30)
    flink.down = True
    stop = FakeStop(clock)
    stop.requested = 15
    w.follow(stop)

    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert sorted((r["checkpoint_id"], r["offset"]) for r in completed) == [(1, 10), (2, 20), (3, 30)]
    marks = {r["checkpoint_id"]: json.loads(r["detail"]).get(vocab.DETAIL_RECOVERED) for r in completed}
    assert marks == {1: None, 2: True, 3: True}
    requested = of(ledger, vocab.EVENT_COMMIT_REQUESTED, JOB_A)
    assert sorted((r["checkpoint_id"], r["offset"]) for r in requested) == [(1, 10), (2, 20), (3, 30)]
    assert of(ledger, vocab.EVENT_RUN_STOPPED) == []  # how the job ended is not known


def test_at_a_stop_with_the_rest_api_up_one_more_poll_records_what_completed_since_the_last(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    flink.submit(JOB_A, T0)
    w = watcher(flink, tmp_path / "ledger", clock)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10})
    stop = FakeStop(clock)
    stop.requested = 15
    w.follow(stop)
    completed = of(tmp_path / "ledger", vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert [(r["checkpoint_id"], r["offset"]) for r in completed] == [(1, 10)]


class FakeBroker:
    """The broker's positions per startup mode, changed by the test; every question is kept."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], int]] = {}
        self.asked: list[tuple[str, list[tuple[str, int]], str | None]] = []

    def at(self, mode: str, partitions: Any, group_id: str | None) -> dict[tuple[str, int], int]:
        self.asked.append((mode, list(partitions), group_id))
        known = self.offsets.get(mode, {})
        return {tp: known[tp] for tp in partitions if tp in known}

    def close(self) -> None:
        pass


def started_at(ledger: Path, run_id: str) -> dict[int, tuple[int, str, int]]:
    """partition -> (offset, source, startup checkpoint) of the run's OFFSETS_RESTORED."""
    out = {}
    for r in of(ledger, vocab.EVENT_OFFSETS_RESTORED, run_id):
        detail = json.loads(r["detail"])
        out[r["partition"]] = (
            r["offset"],
            detail[vocab.DETAIL_SOURCE],
            detail[vocab.DETAIL_STARTUP_CHECKPOINT],
        )
    return out


def test_a_run_from_latest_starts_at_the_brokers_end_once_its_source_holds_splits(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    """The job publishes `start: latest`; its first checkpoint came before the splits (no partition),
    the second holds partition 0 unread at the end the enumerator took and partition 1 read past it."""
    ledger, broker = tmp_path / "ledger", FakeBroker()
    flink.submit(JOB_A, T0)
    flink.params[JOB_A] = {"start": "latest"}
    w = watcher(flink, ledger, clock, startup_key="start", positions=broker)
    w.start()
    w.poll_once()
    flink.complete(JOB_A, 1, T0 + 1000, {})
    w.poll_once()
    assert broker.asked == []  # nothing to ask about before the source has partitions
    broker.offsets[vocab.RESTORE_LATEST] = {("orders", 0): 120, ("orders", 1): 80}
    flink.complete(JOB_A, 2, T0 + 2000, {("orders", 0): 120, ("orders", 1): 95})
    w.poll_once()
    broker.offsets[vocab.RESTORE_LATEST] = {("orders", 0): 500, ("orders", 1): 500}
    flink.complete(JOB_A, 3, T0 + 3000, {("orders", 0): 130, ("orders", 1): 99})
    w.poll_once()

    assert started_at(ledger, JOB_A) == {
        0: (120, vocab.RESTORE_LATEST, 2),
        1: (80, vocab.RESTORE_LATEST, 2),
    }
    assert [r["event_time"] for r in of(ledger, vocab.EVENT_OFFSETS_RESTORED)] == [
        of(ledger, vocab.EVENT_RUN_STARTED)[0]["event_time"]
    ] * 2
    assert (
        json.loads(of(ledger, vocab.EVENT_RUN_STARTED)[0]["detail"])["startup_mode"] == vocab.RESTORE_LATEST
    )
    assert broker.asked == [(vocab.RESTORE_LATEST, [("orders", 0), ("orders", 1)], "payments-group")]


def test_a_run_from_the_group_starts_at_the_groups_offsets_asked_before_its_own_commits(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    """A resubmission from the group's offsets (an operator reset them while it was down): asked at
    the new job's first sight, for the partitions of the job's ledger; its first checkpoint has read
    partition 0 and still holds the committed marker on partition 1."""
    ledger, broker = tmp_path / "ledger", FakeBroker()
    flink.submit(JOB_A, T0, name="payments")
    w = watcher(flink, ledger, clock, flink_job_id=None, flink_job_name="payments", positions=broker)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 100, ("orders", 1): 100})
    w.poll_once()
    flink.end(JOB_A, "CANCELED", T0 + 1500)
    w.poll_once()
    flink.submit(JOB_B, T0 + 10_000, name="payments")
    flink.params[JOB_B] = {"start": "committed"}
    w.startup_key = "start"
    broker.offsets[vocab.RESTORE_GROUP] = {("orders", 0): 50, ("orders", 1): 150}
    w.poll_once()
    broker.offsets[vocab.RESTORE_GROUP] = {("orders", 0): 150, ("orders", 1): 150}  # the job's own
    flink.complete(JOB_B, 1, T0 + 11_000, {("orders", 0): 150, ("orders", 1): KAFKASOURCE_COMMITTED})
    w.poll_once()

    assert started_at(ledger, JOB_B) == {
        0: (50, vocab.RESTORE_GROUP, 1),
        1: (150, vocab.RESTORE_GROUP, 1),
    }
    assert broker.asked == [(vocab.RESTORE_GROUP, [("orders", 0), ("orders", 1)], "payments-group")]
    assert started_at(ledger, JOB_A) == {}  # the first job was told nothing: no mode, no claim


def test_a_run_whose_markers_name_earliest_starts_at_the_log_start_and_an_unknown_mode_claims_nothing(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    ledger, broker = tmp_path / "ledger", FakeBroker()
    broker.offsets[vocab.RESTORE_EARLIEST] = {("orders", 0): 200, ("orders", 1): 200}
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock, positions=broker)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): -2, ("orders", 1): -2})
    w.poll_once()
    assert started_at(ledger, JOB_A) == {
        0: (200, vocab.RESTORE_EARLIEST, 1),
        1: (200, vocab.RESTORE_EARLIEST, 1),
    }

    other = tmp_path / "other"
    flink.submit(JOB_B, T0)
    w = watcher(flink, other, clock, flink_job_id=JOB_B, positions=broker)
    w.start()
    flink.complete(JOB_B, 1, T0 + 1000, {("orders", 0): 12, ("orders", 1): 30})
    w.poll_once()
    assert of(other, vocab.EVENT_OFFSETS_RESTORED) == []


def _named(ledger: Path, checkpoint_id: int) -> list[tuple[int, str]]:
    """(id, reason) of the checkpoints the completion of ``checkpoint_id`` names missed."""
    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED)
    detail = json.loads(next(r for r in completed if r["checkpoint_id"] == checkpoint_id)["detail"])
    return [(m["id"], m[vocab.DETAIL_REASON]) for m in detail.get(vocab.DETAIL_MISSED_CHECKPOINTS, [])]


def test_checkpoints_that_left_the_rest_history_between_two_polls_are_named_counted_and_summed(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    flink.history_size = 2
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10})
    w.poll_once()
    for i in range(2, 6):  # the sidecar was starved: 2 and 3 left the history before its next poll
        flink.complete(JOB_A, i, T0 + i * 1000, {("orders", 0): 10 * i})
    flink.end(JOB_A, "FINISHED", T0 + 6000)
    w.poll_once()

    gone = [(2, vocab.MISSED_NOT_IN_HISTORY), (3, vocab.MISSED_NOT_IN_HISTORY)]
    assert _named(ledger, 4) == gone
    stopped = json.loads(of(ledger, vocab.EVENT_RUN_STOPPED)[0]["detail"])
    assert [(m["id"], m[vocab.DETAIL_REASON]) for m in stopped[vocab.DETAIL_MISSED_CHECKPOINTS]] == gone
    assert [(m["id"], m[vocab.DETAIL_REASON]) for m in w.summary.missed] == gone


def test_a_first_look_names_the_checkpoints_gone_before_it_and_their_commits_are_the_jobs(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    """The sidecar starts after the job (from earliest: the log starts at 100) completed checkpoints
    1-6 (orders-0 at 110, 120, ...): the REST API lists the last 4, Flink retains the last 2. The
    first recorded completion (5) names 1 and 2 (out of the history) and 3 and 4 (files deleted), so
    their commits are the job's, bounded below by where the run started; a reset to 50 meanwhile is
    not."""
    ledger, broker = tmp_path / "ledger", FakeBroker()
    broker.offsets[vocab.RESTORE_EARLIEST] = {("orders", 0): 100}
    flink.history_size = 4
    flink.submit(JOB_A, T0)
    for i in range(1, 7):
        flink.complete(JOB_A, i, T0 + i * 1000, {("orders", 0): 100 + 10 * i})
    for gone in range(1, 5):
        del flink.files[f"file:/cp/{JOB_A}/chk-{gone}"]
    w = watcher(flink, ledger, clock, startup_mode=vocab.RESTORE_EARLIEST, positions=broker)
    w.start()
    w.poll_once()
    flink.end(JOB_A, "FINISHED", T0 + 7000)
    w.poll_once()

    assert sorted(r["checkpoint_id"] for r in of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED)) == [5, 6]
    missed = [(i, vocab.MISSED_NOT_IN_HISTORY) for i in (1, 2)] + [
        (i, vocab.MISSED_FILES_GONE) for i in (3, 4)
    ]
    assert _named(ledger, 5) == missed
    stopped = json.loads(of(ledger, vocab.EVENT_RUN_STOPPED)[0]["detail"])
    assert [m["id"] for m in stopped[vocab.DETAIL_MISSED_CHECKPOINTS]] == [1, 2, 3, 4]
    assert started_at(ledger, JOB_A) == {0: (100, vocab.RESTORE_EARLIEST, 5)}

    shift = T0 / 1000 - ledger_data.T0.timestamp()
    commits = commits_table(
        *(ledger_data.gc(shift + i + 0.14, 0, 100 + 10 * i, group="payments-group") for i in range(1, 7)),
        ledger_data.gc(shift + 2.5, 0, 50, group="payments-group"),  # an operator's reset meanwhile
    )
    window = rc.AuditWindow(until=datetime.now(UTC) + timedelta(hours=1))
    audit = la.LedgerAudit(DeltaTable(str(ledger)).to_pyarrow_table(), commits, window, RULES)
    assert [(f.offset_start, f.severity) for f in commit_rules.foreign_commits(audit)] == [(50, vocab.ERROR)]
    assert sorted(
        (f.offset_start, tuple(f.evidence[vocab.DETAIL_MISSED_CHECKPOINTS]), f.evidence["from_offset"])
        for f in commit_rules.missed_checkpoint_commits(audit)
    ) == [(110 + 10 * i, (1, 2, 3, 4), 100) for i in range(4)]


def test_a_first_look_at_a_long_running_job_names_the_unread_block_by_its_ends(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    """A sidecar first started on a job at checkpoint 100,000: the 99,990 before its history are
    named by the first (saying how many more) and the newest, not one by one: the spans reconcile
    draws from them have the same bounds (the recorded checkpoints around the block)."""
    ledger = tmp_path / "ledger"
    flink.history_size = 10
    flink.submit(JOB_A, T0)
    ids = range(99_991, 100_001)
    for i in ids:
        flink.complete(JOB_A, i, T0 + i, {("orders", 0): i})
    flink.completed_before[JOB_A] = 99_990  # the REST counts say 100,000 completed
    w = watcher(flink, ledger, clock)
    w.start()
    w.poll_once()

    named = w.summary.missed
    assert len(named) == MAX_NAMED_UNREAD
    assert [m["id"] for m in named] == [1, *range(99_991 - MAX_NAMED_UNREAD + 1, 99_991)]
    assert "99970 more" in str(named[0][vocab.DETAIL_MESSAGE])
    assert {m[vocab.DETAIL_REASON] for m in named} == {vocab.MISSED_NOT_IN_HISTORY}


def test_unread_names_a_short_block_one_by_one() -> None:
    assert [m.checkpoint_id for m in unread([3, 4, 5])] == [3, 4, 5]
    assert [m.message for m in unread([3, 4, 5])] == [None, None, None]


def test_a_rise_of_the_sources_commits_failed_between_two_polls_is_a_commit_failure_of_the_job(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    """The broker unreachable for the job's commits while checkpoints complete: Flink's reader counts
    each failed commit (on 1.20 they fail in bursts, as pending requests time out); each rise is a
    COMMIT_FAILED on the newest recorded checkpoint, and reconcile names the job's COMMIT_FAILURE."""
    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0)
    w = watcher(flink, ledger, clock)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {("orders", 0): 10, ("orders", 1): 7})
    w.poll_once()  # the reader's counters are not registered yet: nothing to compare
    flink.commit_counts[JOB_A] = (0, 2)
    flink.complete(JOB_A, 2, T0 + 2000, {("orders", 0): 12, ("orders", 1): 9})
    w.poll_once()
    flink.commit_counts[JOB_A] = (20, 2)  # the outage
    flink.complete(JOB_A, 3, T0 + 3000, {("orders", 0): 12, ("orders", 1): 9})
    w.poll_once()
    flink.commit_counts[JOB_A] = (40, 2)
    flink.complete(JOB_A, 4, T0 + 4000, {("orders", 0): 15, ("orders", 1): 9})
    w.poll_once()
    w.poll_once()  # no new checkpoint: no sample
    flink.commit_counts[JOB_A] = (40, 4)  # back
    flink.complete(JOB_A, 5, T0 + 5000, {("orders", 0): 15, ("orders", 1): 9})
    w.poll_once()

    failed = of(ledger, vocab.EVENT_COMMIT_FAILED, JOB_A)
    assert sorted((r["checkpoint_id"], r["partition"], r["offset"]) for r in failed) == [
        (3, 0, 12), (3, 1, 9), (4, 0, 15), (4, 1, 9),
    ]  # fmt: skip
    details = [json.loads(r["detail"]) for r in failed]
    assert {(d[vocab.DETAIL_ERROR], d[vocab.DETAIL_COMMITS_FAILED]) for d in details} == {
        (vocab.ERROR_COMMITS_FAILED_METRIC, 20)
    }
    assert w.summary.failed_commits == 40

    table = DeltaTable(str(ledger)).to_pyarrow_table()
    window = rc.AuditWindow(until=datetime.now(UTC) + timedelta(hours=1))
    found = commit_rules.commit_failures(la.LedgerAudit(table, commits_table(), window, RULES))
    assert sorted(
        (f.finding_type, f.job_name, f.run_id, f.partition, f.severity, f.record_count) for f in found
    ) == [(vocab.COMMIT_FAILURE, "payments", JOB_A, p, vocab.INFO, 2) for p in (0, 1)]


def test_a_sources_commit_counters_are_found_by_their_names_under_any_operator_prefix() -> None:
    listed = [
        {"id": "Source__orders.numRecordsOut"},
        {"id": "Source__orders.KafkaSourceReader.commitsFailed"},
    ]
    assert commit_metric_ids(listed) == ("Source__orders.KafkaSourceReader.commitsFailed", None)
    legacy = [
        {"id": "Source__legacy.KafkaConsumer.commitsFailed"},
        {"id": "Source__legacy.KafkaConsumer.commitsSucceeded"},
    ]
    assert commit_metric_ids(legacy) == (
        "Source__legacy.KafkaConsumer.commitsFailed",
        "Source__legacy.KafkaConsumer.commitsSucceeded",
    )
    assert commit_metric_ids([{"id": "Source__x.numRecordsOut"}]) is None
    metrics = CommitMetrics("v", "a.KafkaSourceReader.commitsFailed", "a.KafkaSourceReader.commitsSucceeded")
    assert parse_commit_counts(
        [
            {"id": "a.KafkaSourceReader.commitsFailed", "sum": 40.0},
            {"id": "a.KafkaSourceReader.commitsSucceeded", "sum": 2.0},
        ],
        metrics,
    ) == CommitCounts(40, 2)
    assert parse_commit_counts([], metrics) is None


def _kill_scene(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path, prefetch: Any = None
) -> tuple[FlinkWatcher, Path, Callable[[int], None]]:
    """Job A records checkpoint 1 (orders-0 at 30, orders-1 at 5); checkpoints 2 and 3 complete
    while its sidecar is behind and are deleted once 4 and 5 complete (orders-1 at 9); the process
    is killed and job B restored from 5. Returns the watcher (one poll before the kill), the ledger
    and a function writing a retained `chk-N` of job A (deleted again by the test)."""
    from tests.unit import flink_bytes as fb

    offsets = {1: (30, 5), 2: (30, 7), 3: (30, 8), 4: (30, 9), 5: (30, 9)}
    root = tmp_path / "checkpoints"
    flink.config.append({"key": "execution.checkpointing.dir", "value": f"file:{root}"})

    def retain(checkpoint_id: int) -> None:
        chk = root / JOB_A / f"chk-{checkpoint_id}"
        chk.mkdir(parents=True)
        o0, o1 = offsets[checkpoint_id]
        splits = [[("orders", 0, o0)], [("orders", 1, o1)]]
        (chk / "_metadata").write_bytes(fb.kafka_source_checkpoint(4, checkpoint_id, splits))
        done_s = (T0 + checkpoint_id * 1000 + 40) / 1000  # Flink writes _metadata at the completion
        os.utime(chk / "_metadata", (done_s, done_s))

    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0, name="payments")
    w = watcher(flink, ledger, clock, flink_job_id=None, flink_job_name="payments", prefetch=prefetch)
    w.read = read_checkpoint
    w.start()
    retain(1)
    flink.complete(JOB_A, 1, T0 + 1000, {})
    flink.history[JOB_A][-1]["external_path"] = f"file:{root / JOB_A / 'chk-1'}"
    w.poll_once()
    return w, ledger, retain


def _restore_b(flink: FakeFlink, tmp_path: Path) -> None:
    flink.jobs.clear()
    flink.submit(JOB_B, T0 + 9000, name="payments")
    flink.restore(JOB_B, 5, T0 + 9500)
    restored = tmp_path / "checkpoints" / JOB_A / "chk-5"
    flink.restored[JOB_B]["external_path"] = f"file:{restored}"  # type: ignore[index]


def _job_commits() -> pa.Table:
    """What job A's source committed, 100 ms after each completion: orders-1 moved from 5 to 9
    across the checkpoints 2 and 3."""
    shift = T0 / 1000 - ledger_data.T0.timestamp()
    commits = {1: (30, 5), 2: (30, 7), 3: (30, 8), 4: (30, 9), 5: (30, 9)}
    return commits_table(
        *(
            ledger_data.gc(shift + i + 0.14, p, commits[i][p], group="payments-group")
            for i in sorted(commits)
            for p in (0, 1)
        )
    )


def test_checkpoints_a_sidecar_behind_a_killed_job_never_saw_are_named_missed_and_their_commits_the_jobs(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    w, ledger, retain = _kill_scene(flink, clock, tmp_path)
    retain(4)
    retain(5)  # 2 and 3 were deleted as 4 and 5 completed: the sidecar never saw them
    _restore_b(flink, tmp_path)
    w.poll_once()

    # Never silent: both are named, on the summary and on the restored checkpoint's completion.
    assert sorted((m["id"], m[vocab.DETAIL_REASON]) for m in w.summary.missed) == [
        (2, vocab.MISSED_FILES_GONE),
        (3, vocab.MISSED_FILES_GONE),
    ]
    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert sorted({r["checkpoint_id"] for r in completed}) == [1, 4, 5]
    restored = [json.loads(r["detail"]) for r in completed if r["checkpoint_id"] == 5]
    assert {tuple(m["id"] for m in d[vocab.DETAIL_MISSED_CHECKPOINTS]) for d in restored} == {(2, 3)}
    # orders-0 was at 30 on both sides of them, so they held 30 too and committed it if they
    # completed; orders-1 moved (5, then 9): where they were is not known.
    requested = of(ledger, vocab.EVENT_COMMIT_REQUESTED, JOB_A)
    assert sorted((r["checkpoint_id"], r["partition"], r["offset"]) for r in requested) == [
        (1, 0, 30), (1, 1, 5), (2, 0, 30), (3, 0, 30),
    ]  # fmt: skip

    # Their commits of orders-1 (7, 8) lie between checkpoint 1's offset and 4's, made between their
    # completions: the job's own commits of checkpoints the ledger missed, information, not foreign.
    table = DeltaTable(str(ledger)).to_pyarrow_table()
    window = rc.AuditWindow(until=datetime.now(UTC) + timedelta(hours=1))
    audit = la.LedgerAudit(table, _job_commits(), window, RULES)
    assert commit_rules.foreign_commits(audit) == []
    found = commit_rules.missed_checkpoint_commits(audit)
    assert sorted(
        (
            f.partition,
            f.offset_start,
            f.severity,
            f.run_id,
            f.evidence[vocab.DETAIL_MISSED_CHECKPOINTS],
            f.evidence["from_checkpoint"],
            f.evidence["to_checkpoint"],
        )
        for f in found
    ) == [(1, 7, vocab.INFO, JOB_A, [2, 3], 1, 4), (1, 8, vocab.INFO, JOB_A, [2, 3], 1, 4)]


def test_checkpoints_read_ahead_before_flink_deleted_them_are_recovered_after_a_kill(
    flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    from app.flink.prefetch import Prefetcher

    prefetch = Prefetcher(read_checkpoint)  # scanned by hand below: no thread, no timing
    w, ledger, retain = _kill_scene(flink, clock, tmp_path, prefetch)
    retain(2)
    retain(3)
    assert prefetch.scan_once() == 2  # read as they appeared, though the sidecar's loop was behind
    retain(4)
    retain(5)
    for gone in (2, 3):
        shutil.rmtree(tmp_path / "checkpoints" / JOB_A / f"chk-{gone}")
    _restore_b(flink, tmp_path)
    w.poll_once()

    assert w.summary.missed == []
    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert sorted((r["checkpoint_id"], r["partition"], r["offset"]) for r in completed) == [
        (i, p, o) for i, pair in enumerate([(30, 5), (30, 7), (30, 8), (30, 9), (30, 9)], 1)
        for p, o in enumerate(pair)
    ]  # fmt: skip
    table = DeltaTable(str(ledger)).to_pyarrow_table()
    window = rc.AuditWindow(until=datetime.now(UTC) + timedelta(hours=1))
    assert commit_rules.foreign_commits(la.LedgerAudit(table, _job_commits(), window, RULES)) == []
