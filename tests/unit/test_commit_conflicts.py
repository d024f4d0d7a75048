"""A write that loses its commit race to a concurrent one is run again on the newer version.

Each race is real and forced, not timed: the losing operation loads its table, then (once) a rival
commit lands through another handle, so the loser's commit meets delta-rs's conflict check exactly
as it does beside a running `watch` (its MERGEs) or a `maintain` (its compaction and deletions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from pyspark.sql.types import LongType, StringType, StructField, StructType

from app.errors import InfrastructureError
from app.storage import backend, delta_rows, maintenance

pytestmark = pytest.mark.unit

SCHEMA = StructType([StructField("id", StringType()), StructField("v", LongType())])
SEEDED = 5  # one file per append: a table worth compacting


def seeded(tmp_path: Path) -> str:
    path = str(tmp_path / "t")
    for n in range(SEEDED):
        write_deltalake(path, pa.table({"id": [f"r-{n}"], "v": [n]}), mode="append")
    return path


def rows(path: str) -> dict[str, int]:
    return {r["id"]: r["v"] for r in DeltaTable(path).to_pyarrow_table().to_pylist()}


def rival_merge(path: str, updates: dict[str, int]) -> Callable[[], None]:
    """A MERGE by id through its own handle (as a watch cycle's): matched rows are rewritten."""

    def run() -> None:
        data = pa.table({"id": list(updates), "v": list(updates.values())})
        (
            DeltaTable(path)
            .merge(data, predicate='t."id" = s."id"', source_alias="s", target_alias="t")
            .when_matched_update(updates={'"v"': 's."v"'})
            .when_not_matched_insert_all()
            .execute()
        )

    return run


def rival_compaction(path: str) -> Callable[[], None]:
    def run() -> None:
        DeltaTable(path).optimize.compact()

    return run


def race_once(
    monkeypatch: pytest.MonkeyPatch, module: object, loader: str, rival: Callable[[], None]
) -> list[str]:
    """Make ``module.loader`` (what the operation loads its table with) let ``rival`` commit right
    after the first load; the names of the rivals that ran."""
    real = getattr(module, loader)
    ran: list[str] = []

    def load_then_race(*args: Any) -> Any:
        loaded = real(*args)
        if not ran:
            ran.append(loader)
            rival()
        return loaded

    monkeypatch.setattr(module, loader, load_then_race)
    return ran


def test_a_merge_that_lost_to_a_compaction_is_merged_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = seeded(tmp_path)
    ran = race_once(monkeypatch, delta_rows, "_ensure", rival_compaction(path))
    with caplog.at_level(logging.INFO, logger=delta_rows.__name__):
        delta_rows.merge_rows(None, path, SCHEMA, [{"id": "r-1", "v": 10}, {"id": "new", "v": 7}], "id")
    assert ran == ["_ensure"]
    assert rows(path) == {"r-0": 0, "r-1": 10, "r-2": 2, "r-3": 3, "r-4": 4, "new": 7}
    assert [h["operation"] for h in DeltaTable(path).history(2)] == ["MERGE", "OPTIMIZE"]
    assert f"merge into {path} lost a commit race (attempt 1), retrying" in caplog.text


def test_a_delete_that_lost_to_a_merge_deletes_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = seeded(tmp_path)
    ran = race_once(monkeypatch, backend, "open_table", rival_merge(path, {"r-2": 20, "r-9": 9}))
    delta_rows.delete_where_in(None, path, "id", ["r-0", "r-2"])
    assert ran == ["open_table"]
    assert rows(path) == {"r-1": 1, "r-3": 3, "r-4": 4, "r-9": 9}


def test_a_replace_that_lost_to_a_merge_replaces_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = seeded(tmp_path)
    ran = race_once(monkeypatch, delta_rows, "_ensure", rival_merge(path, {"r-1": 11}))
    delta_rows.replace_rows(None, path, SCHEMA, [{"id": "r-1", "v": 100}], "id = 'r-1'")
    assert ran == ["_ensure"]
    assert rows(path) == {"r-0": 0, "r-1": 100, "r-2": 2, "r-3": 3, "r-4": 4}


def test_a_compaction_that_lost_to_a_merge_compacts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = seeded(tmp_path)
    ran = race_once(monkeypatch, maintenance, "_table", rival_merge(path, {"r-3": 30}))
    done = maintenance.compact(None, path)
    assert ran == ["_table"]
    assert done.files_added == 1
    assert len(DeltaTable(path).file_uris()) == 1
    assert rows(path) == {"r-0": 0, "r-1": 1, "r-2": 2, "r-3": 30, "r-4": 4}


def test_a_deletion_of_old_rows_that_lost_to_a_merge_deletes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = seeded(tmp_path)
    ran = race_once(monkeypatch, maintenance, "_table", rival_merge(path, {"r-0": 0, "r-4": 40}))
    assert maintenance.delete_rows(None, path, "v < 2", append_only=False) == 2
    assert ran == ["_table"]
    assert rows(path) == {"r-2": 2, "r-3": 3, "r-4": 40}


def storage_error(cause: Exception) -> InfrastructureError:
    """``cause`` as the operations see it: through `backend.storage_errors`."""
    try:
        with backend.storage_errors(backend.location(None, "t"), "merge into"):
            raise cause
    except InfrastructureError as exc:
        return exc
    raise AssertionError("storage_errors raised nothing")


def conflict() -> InfrastructureError:
    return storage_error(
        CommitFailedError("Commit failed: a concurrent transaction deleted data this operation read.")
    )


def counting(error: Callable[[], Exception]) -> tuple[list[int], Callable[[], None]]:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(len(calls) + 1)
        raise error()

    return calls, attempt


def test_a_conflict_lost_every_time_is_raised_after_the_last_attempt() -> None:
    calls, attempt = counting(conflict)
    with pytest.raises(InfrastructureError, match="a concurrent transaction deleted data"):
        delta_rows.retrying_conflicts("merge into", "t", attempt)
    assert len(calls) == delta_rows.CONFLICT_ATTEMPTS


def test_what_is_no_conflict_or_cannot_be_replayed_is_raised_at_once() -> None:
    calls, attempt = counting(lambda: InfrastructureError("cannot open: disk gone"))
    with pytest.raises(InfrastructureError, match="disk gone"):
        delta_rows.retrying_conflicts("merge into", "t", attempt)
    assert calls == [1]

    calls, attempt = counting(lambda: storage_error(DeltaError("Generic error")))
    with pytest.raises(InfrastructureError, match="Generic error"):
        delta_rows.retrying_conflicts("merge into", "t", attempt)
    assert calls == [1]

    calls, attempt = counting(conflict)
    with pytest.raises(InfrastructureError, match="concurrent"):
        delta_rows.retrying_conflicts("append to", "t", attempt, replayable=False)
    assert calls == [1]
