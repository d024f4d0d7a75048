"""`flink-import` over retained checkpoint and savepoint directories (their `_metadata` written as
Flink writes it, decoded by the real decoder) into a real Delta ledger on local disk."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from app.config import StorageConfig
from app.contracts import vocabulary as vocab
from app.flink.import_ import find_retained, import_retained
from app.flink.watcher import FlinkLedger
from tests.unit import flink_bytes as fb

pytestmark = pytest.mark.unit

JOB = "4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4"
T0 = 1764237600  # seconds


def write(directory: Path, checkpoint_id: int, offsets: tuple[int, int], at_s: int) -> Path:
    """A retained checkpoint of a two-partition KafkaSource (one split per subtask)."""
    directory.mkdir(parents=True)
    splits = [[("orders", 0, offsets[0])], [("orders", 1, offsets[1])]]
    (directory / "_metadata").write_bytes(fb.kafka_source_checkpoint(4, checkpoint_id, splits))
    os.utime(directory / "_metadata", (at_s, at_s))
    return directory


def ledger_of(path: Path) -> FlinkLedger:
    return FlinkLedger(StorageConfig(), str(path), "payments")


def rows(ledger: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = DeltaTable(str(ledger)).to_pyarrow_table().to_pylist()
    return found


def test_retained_checkpoints_and_savepoints_are_imported_once(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    write(root / JOB / "chk-3", 3, (30, 21), T0 + 3)
    write(root / JOB / "chk-4", 4, (40, 28), T0 + 4)
    write(root / JOB / "chk-5", 5, (50, 35), T0 + 5)
    (root / JOB / "shared").mkdir()
    (root / JOB / "taskowned").mkdir()
    write(root / "savepoint-4f2c7d-0a1b2c3d4e5f", 6, (55, 40), T0 + 6)
    ledger = tmp_path / "ledger"

    first = import_retained(str(root), ledger_of(ledger), group_id="payments-group")

    assert (first.found, first.imported, first.already_recorded) == (4, 4, 0)
    assert (first.oldest_checkpoint, first.newest_checkpoint) == (3, 6)
    assert first.runs == [JOB]
    assert first.runs_started == [JOB]
    stored = rows(ledger)
    assert all(json.loads(r["detail"])[vocab.DETAIL_IMPORTED] for r in stored)
    completed = {
        (r["checkpoint_id"], r["partition"]): r
        for r in stored
        if r["event_type"] == vocab.EVENT_CHECKPOINT_COMPLETED
    }
    assert {k: r["offset"] for k, r in completed.items()} == {
        (3, 0): 30,
        (3, 1): 21,
        (4, 0): 40,
        (4, 1): 28,
        (5, 0): 50,
        (5, 1): 35,
        (6, 0): 55,
        (6, 1): 40,
    }
    assert completed[(4, 0)]["event_time"].timestamp() == T0 + 4
    assert json.loads(completed[(6, 0)]["detail"])[vocab.DETAIL_SAVEPOINT] is True
    restored = [r for r in stored if r["event_type"] == vocab.EVENT_OFFSETS_RESTORED]
    assert sorted((r["partition"], r["offset"], r["checkpoint_id"]) for r in restored) == [
        (0, 30, 3),
        (1, 21, 3),
    ]
    started = [r for r in stored if r["event_type"] == vocab.EVENT_RUN_STARTED]
    assert len(started) == 1
    assert json.loads(started[0]["detail"])[vocab.DETAIL_FLINK_JOB_ID] == JOB
    assert sum(1 for r in stored if r["event_type"] == vocab.EVENT_COMMIT_REQUESTED) == 8

    second = import_retained(str(root), ledger_of(ledger), group_id="payments-group")

    assert (second.imported, second.already_recorded, second.events_written) == (0, 4, 0)
    assert second.runs_started == []
    assert len(rows(ledger)) == len(stored)


def test_a_newer_checkpoint_retained_later_is_added_to_the_same_run(tmp_path: Path) -> None:
    root = tmp_path / JOB
    write(root / "chk-3", 3, (30, 21), T0 + 3)
    ledger = tmp_path / "ledger"
    import_retained(str(root), ledger_of(ledger))
    write(root / "chk-4", 4, (40, 28), T0 + 4)

    again = import_retained(str(root), ledger_of(ledger))

    assert (again.imported, again.already_recorded) == (1, 1)
    assert {r["run_id"] for r in rows(ledger)} == {JOB}


def test_an_undecodable_checkpoint_is_reported_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / JOB
    write(root / "chk-3", 3, (30, 21), T0 + 3)
    (root / "chk-4").mkdir()
    (root / "chk-4" / "_metadata").write_bytes(b"\x49\x60\x67\x2d\x00\x00\x00\x63truncated")
    ledger = tmp_path / "ledger"

    result = import_retained(str(root), ledger_of(ledger))

    assert result.imported == 1
    assert [u["path"] for u in result.unreadable] == [str(root / "chk-4")]
    assert "_metadata" in result.unreadable[0]["error"]
    assert {
        r["checkpoint_id"] for r in rows(ledger) if r["event_type"] == vocab.EVENT_CHECKPOINT_SNAPSHOT
    } == {3}


def test_a_savepoint_of_an_unknown_job_is_reported_not_imported(tmp_path: Path) -> None:
    write(tmp_path / "savepoints" / "savepoint-abcdef-0a1b2c3d4e5f", 9, (1, 2), T0)

    result = import_retained(str(tmp_path / "savepoints"), ledger_of(tmp_path / "ledger"))

    assert result.unassigned_savepoints == [str(tmp_path / "savepoints" / "savepoint-abcdef-0a1b2c3d4e5f")]
    assert result.imported == 0


def test_the_walk_finds_checkpoints_under_a_root_a_job_or_a_checkpoint_itself(tmp_path: Path) -> None:
    chk = write(tmp_path / "root" / JOB / "chk-7", 7, (1, 2), T0)

    for path in (tmp_path / "root", tmp_path / "root" / JOB, chk, f"file:{chk}"):
        found = find_retained(str(path))
        assert [(f.path, f.job_key, f.savepoint) for f in found] == [(str(chk), JOB, False)]


def test_what_the_sidecar_recorded_is_left_out_and_a_checkpoint_it_missed_joins_its_run(
    tmp_path: Path,
) -> None:
    from app.contracts.offsets import EventSource
    from app.flink import events as ev
    from app.flink.metadata import read_checkpoint
    from app.flink.rest import CheckpointStat, Restore

    root = tmp_path / JOB
    chk3 = write(root / "chk-3", 3, (30, 21), T0 + 3)
    write(root / "chk-4", 4, (40, 28), T0 + 4)
    ledger = ledger_of(tmp_path / "ledger")
    ledger.ensure()
    attempt = ev.Attempt(JOB, T0 * 1000, Restore(2, T0 * 1000 + 2500, False, None))
    source = EventSource("payments", attempt.run_id, vocab.ENGINE_FLINK_KAFKASOURCE, None)
    ledger.recorder(source).start(attempt.started_at, ev.run_start(attempt))
    stat = CheckpointStat(3, "COMPLETED", False, T0 * 1000 + 3000, T0 * 1000 + 3040, f"file:{chk3}", False)
    ledger.recorder(source).batch(3, ev.checkpoint_events(source, stat, read_checkpoint(str(chk3))))

    result = import_retained(str(root), ledger)

    assert (result.imported, result.already_recorded) == (1, 1)
    assert result.runs_started == []
    assert result.runs == [attempt.run_id]
    imported = [r for r in rows(tmp_path / "ledger") if r["checkpoint_id"] == 4]
    assert {r["run_id"] for r in imported} == {attempt.run_id}
