"""`offset-audit ledger-import` over checkpoint directories laid out as Spark writes them (real
Spark for the files, real Delta for the ledger; the files themselves are written here, so each
case - batch 0 purged, a batch not committed yet, a recreated checkpoint - is exact).

tests/kafka/test_ledger_import.py imports the checkpoint of a real query against a real broker."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from app import audit, cli
from app.contracts.offsets import EventSource
from app.stream.ledger import LedgerWriter
from tests.support.config import set_options

pytestmark = pytest.mark.spark

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
TOPIC = "payments"


def at(path: Path, seconds: float) -> None:
    """Pin a checkpoint file's modification time: the time its events carry."""
    os.utime(path, (T0 + seconds, T0 + seconds))


class Checkpoint:
    """A Spark checkpoint directory: metadata, sources/0/0, offsets/<n>, commits/<n>."""

    def __init__(self, root: Path, initial: dict[int, int] | None = None) -> None:
        self.root = root
        self.query_id = str(uuid.uuid4())
        (root / "offsets").mkdir(parents=True)
        (root / "commits").mkdir()
        (root / "metadata").write_text(json.dumps({"id": self.query_id}) + "\n")
        at(root / "metadata", 0)
        if initial is not None:
            (root / "sources" / "0").mkdir(parents=True)
            (root / "sources" / "0" / "0").write_text("\x00v1\n" + self.offsets_json(initial))

    @staticmethod
    def offsets_json(offsets: dict[int, int]) -> str:
        return json.dumps({TOPIC: {str(p): o for p, o in offsets.items()}})

    def plan(self, batch: int, offsets: dict[int, int]) -> None:
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": int((T0 + 10 * batch) * 1000), "conf": {}}
        path = self.root / "offsets" / str(batch)
        path.write_text(f"v1\n{json.dumps(meta)}\n{self.offsets_json(offsets)}")
        at(path, 10 * batch + 1)

    def commit(self, batch: int) -> None:
        path = self.root / "commits" / str(batch)
        path.write_text('v1\n{"nextBatchWatermarkMs":0}')
        at(path, 10 * batch + 2)


def import_(ledger: Path, checkpoint: Path, tmp_path: Path, *extra: str) -> int:
    argv = ["ledger-import", "--checkpoint", str(checkpoint), "--job", "payments", "--ledger", str(ledger)]
    return cli.main([*argv, *set_options(data_dir=tmp_path / "data"), *extra])


def rows(ledger: Path) -> list[dict[str, Any]]:
    return sorted(
        DeltaTable(str(ledger)).to_pyarrow_table().to_pylist(),
        key=lambda r: (r["event_time"], r["event_type"], r["checkpoint_id"] or -1, r["partition"] or -1),
    )


def offsets_of(ledger: Path, event_type: str) -> dict[int | None, dict[int, int]]:
    out: dict[int | None, dict[int, int]] = {}
    for r in rows(ledger):
        if r["event_type"] == event_type:
            out.setdefault(r["checkpoint_id"], {})[r["partition"]] = r["offset"]
    return out


def test_import_writes_the_retained_batches_once_as_an_attached_run_would(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cp = Checkpoint(tmp_path / "cp", initial={0: 5, 1: 0})
    for batch, offsets in enumerate([{0: 20, 1: 10}, {0: 40, 1: 30}, {0: 60, 1: 50}]):
        cp.plan(batch, offsets)
        cp.commit(batch)
    cp.plan(3, {0: 80, 1: 70})  # planned, not committed: the query stopped or is running it
    ledger = tmp_path / "ledger"

    assert import_(ledger, cp.root, tmp_path, "--progress-every", "2") == 0
    assert "2/4 batches" in capsys.readouterr().err

    [started] = [r for r in rows(ledger) if r["event_type"] == "RUN_STARTED"]
    detail = json.loads(started["detail"])
    assert (started["run_id"], detail["query_id"], detail["imported"]) == (cp.query_id, cp.query_id, True)
    assert started["event_time"].timestamp() == T0  # the query's creation: its metadata file
    assert offsets_of(ledger, "OFFSETS_RESTORED") == {None: {0: 5, 1: 0}}
    assert offsets_of(ledger, "CHECKPOINT_SNAPSHOT") == {
        0: {0: 20, 1: 10},
        1: {0: 40, 1: 30},
        2: {0: 60, 1: 50},
        3: {0: 80, 1: 70},
    }
    assert offsets_of(ledger, "CHECKPOINT_COMPLETED") == {
        0: {0: 20, 1: 10},
        1: {0: 40, 1: 30},
        2: {0: 60, 1: 50},
    }
    for r in rows(ledger):
        assert r["run_id"] == cp.query_id
        assert json.loads(r["detail"])["imported"] is True
        if r["event_type"] == "CHECKPOINT_SNAPSHOT":  # when Spark wrote offsets/<n>
            assert r["event_time"].timestamp() == T0 + 10 * r["checkpoint_id"] + 1
        if r["event_type"] == "CHECKPOINT_COMPLETED":  # when Spark wrote commits/<n>
            assert r["event_time"].timestamp() == T0 + 10 * r["checkpoint_id"] + 2

    before, version = len(rows(ledger)), DeltaTable(str(ledger)).version()
    assert import_(ledger, cp.root, tmp_path) == 0
    assert (len(rows(ledger)), DeltaTable(str(ledger)).version()) == (before, version)

    cp.commit(3)  # the running query finished batch 3: a later import adds its completion alone
    assert import_(ledger, cp.root, tmp_path) == 0
    batch_3 = [r["event_type"] for r in rows(ledger) if r["checkpoint_id"] == 3]
    assert sorted(batch_3) == ["CHECKPOINT_COMPLETED"] * 2 + ["CHECKPOINT_SNAPSHOT"] * 2
    assert len(rows(ledger)) == before + 2


def test_a_purged_batch_0_starts_the_run_at_the_oldest_retained_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    cp = Checkpoint(tmp_path / "cp", initial={0: 0, 1: 0})
    for batch in (7, 8):  # Spark purged 0..6 (minBatchesToRetain)
        cp.plan(batch, {0: 10 * batch, 1: 10 * batch + 1})
        cp.commit(batch)
    ledger = tmp_path / "ledger"

    assert import_(ledger, cp.root, tmp_path) == 0

    [started] = [r for r in rows(ledger) if r["event_type"] == "RUN_STARTED"]
    assert json.loads(started["detail"])["restored_checkpoint_id"] == 7
    assert started["event_time"].timestamp() == T0 + 71  # when Spark planned batch 7
    restored = [r for r in rows(ledger) if r["event_type"] == "OFFSETS_RESTORED"]
    assert {(r["partition"], r["offset"], r["checkpoint_id"]) for r in restored} == {(0, 70, 7), (1, 71, 7)}
    assert {json.loads(r["detail"])["source"] for r in restored} == {"checkpoint"}
    assert set(offsets_of(ledger, "CHECKPOINT_COMPLETED")) == {7, 8}


def test_a_recreated_checkpoint_is_a_new_run_whose_batches_are_imported_too(
    spark: SparkSession, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    first = Checkpoint(tmp_path / "cp", initial={0: 0, 1: 0})
    first.plan(0, {0: 10, 1: 10})
    first.commit(0)
    assert import_(ledger, first.root, tmp_path) == 0

    for child in sorted(first.root.rglob("*"), reverse=True):  # deleted, then recreated in place
        child.rmdir() if child.is_dir() else child.unlink()
    first.root.rmdir()
    second = Checkpoint(tmp_path / "cp", initial={0: 30, 1: 30})
    second.plan(0, {0: 35, 1: 32})
    second.commit(0)
    assert import_(ledger, second.root, tmp_path) == 0

    runs = {r["run_id"] for r in rows(ledger) if r["event_type"] == "RUN_STARTED"}
    assert runs == {first.query_id, second.query_id}
    completed = {
        (r["run_id"], r["checkpoint_id"], r["partition"]): r["offset"]
        for r in rows(ledger)
        if r["event_type"] == "CHECKPOINT_COMPLETED"
    }
    assert completed == {
        (first.query_id, 0, 0): 10,
        (first.query_id, 0, 1): 10,
        (second.query_id, 0, 0): 35,
        (second.query_id, 0, 1): 32,
    }


def test_a_directory_that_is_not_a_checkpoint_exits_2_naming_it(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-checkpoint"
    assert import_(tmp_path / "ledger", missing, tmp_path) == 2
    assert str(missing) in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert import_(tmp_path / "ledger", empty, tmp_path) == 2
    assert f"{empty}/metadata does not exist" in capsys.readouterr().err
    assert not (tmp_path / "ledger").exists()


def test_an_unwritable_ledger_exits_3(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cp = Checkpoint(tmp_path / "cp", initial={0: 0})
    cp.plan(0, {0: 10})
    cp.commit(0)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the ledger's parent directory should be")

    assert import_(blocker / "ledger", cp.root, tmp_path) == 3
    assert "infrastructure error" in capsys.readouterr().err


def test_the_public_api_imports_a_checkpoint_from_the_active_session(
    spark: SparkSession, tmp_path: Path
) -> None:
    cp = Checkpoint(tmp_path / "cp", initial={0: 0})
    cp.plan(0, {0: 10})
    cp.commit(0)
    ledger = tmp_path / "ledger"

    result = audit.import_checkpoint(f"{cp.root}/", job_name="payments", ledger=str(ledger))

    assert (result.run_id, result.batches_imported, result.run_start_written) == (cp.query_id, 1, True)
    assert offsets_of(ledger, "CHECKPOINT_COMPLETED") == {0: {0: 10}}
    assert audit.import_checkpoint(str(cp.root), job_name="payments", ledger=str(ledger)).events_written == 0


def test_a_batch_under_the_querys_transaction_id_is_not_imported_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A writer that does not name the query in a RUN_STARTED (the reference job, say) but wrote a
    batch under the query's transaction id: the import adds that batch nothing."""
    cp = Checkpoint(tmp_path / "cp", initial={0: 0})
    for batch in (0, 1):
        cp.plan(batch, {0: 10 * (batch + 1)})
        cp.commit(batch)
    ledger = tmp_path / "ledger"
    other = LedgerWriter(spark, str(ledger), "payments", "other-run", scope=cp.query_id)
    other.ensure()
    source = EventSource("payments", "other-run", "spark", None)
    other.write(
        source.partition_events("CHECKPOINT_COMPLETED", datetime.now(UTC), 0, {(TOPIC, 0): 10}, {}), 0
    )

    result = audit.import_checkpoint(str(cp.root), job_name="payments", ledger=str(ledger))

    assert (result.batches_imported, result.batches_recorded) == (1, 1)
    completed = {
        (r["run_id"], r["checkpoint_id"]) for r in rows(ledger) if r["event_type"] == "CHECKPOINT_COMPLETED"
    }
    assert completed == {("other-run", 0), (cp.query_id, 1)}
