"""What a Delta sink's log adds to a checkpoint's import (app.stream.sink_evidence): each batch
held, lacked or beyond the log's retention, the detail its imported completion carries, and the
import stopped on a sink that holds nothing of the query."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app import cli
from app.errors import UsageError
from app.storage.delta_log import SinkCommit, SinkLog
from app.stream.sink_evidence import (
    HELD,
    LACKED,
    UNVERIFIABLE,
    SinkEvidence,
    require_commits,
    sink_counts,
)
from tests.support.config import set_options

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
QUERY = "query-1"


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def commit(version: int, batch: int | None, rows: int = 10, app: str = QUERY) -> SinkCommit:
    txns = () if batch is None else ((app, batch),)
    return SinkCommit(version, at(version * 10), "STREAMING UPDATE", txns, rows)


def evidence(*commits: SinkCommit, first: int = 0) -> SinkEvidence:
    return SinkEvidence.of("/sink", QUERY, SinkLog(commits, first))


def test_a_batch_is_held_lacked_or_taken_back_by_a_restore() -> None:
    restore = SinkCommit(4, at(40), "RESTORE", (), 0, restored_to=1)
    sink = evidence(commit(0, None), commit(1, 0), commit(2, 2), commit(3, 3, rows=0), restore)
    assert [sink.status(b, at(b * 10 + 5)) for b in range(4)] == [HELD, LACKED, LACKED, HELD]
    # batch 1 never committed; batch 2's rows were taken back; batch 3 was empty: nothing lost


def test_before_the_oldest_commit_file_left_a_batch_is_unverifiable_not_lacked() -> None:
    sink = evidence(commit(10, 5), commit(12, 7), first=10)  # versions below 10 were cleaned
    assert sink.log.starts_at == at(100)
    assert sink.status(4, at(95)) == UNVERIFIABLE
    assert sink.status(6, at(110)) == LACKED  # completed after the log starts: lost
    assert sink.status(7, at(125)) == HELD


def test_a_completion_names_its_sink_versions_and_first_commit_time() -> None:
    sink = evidence(commit(1, 0), commit(2, 1), commit(3, 1))  # batch 1 written twice
    assert sink.completion_detail(1, at(35)) == {
        "sink_versions": [2, 3],
        "sink_committed_at": at(20).isoformat(),
        "sink_status": HELD,
    }
    assert sink.completion_detail(5, at(60)) == {
        "sink_versions": [],
        "sink_committed_at": None,
        "sink_status": LACKED,
    }
    assert sink.committed_at(1) == at(20)  # the completion's time when its file's is gone
    assert sink.run_detail() == {"sink": "/sink", "sink_app_id": QUERY}


def test_only_the_app_ids_own_commits_count() -> None:
    sink = evidence(commit(1, 0, app="another-query"))
    assert sink.batches == {}
    with pytest.raises(UsageError, match=r"--sink /sink: .*no commit of app id query-1.*--sink-app-id"):
        require_commits(sink, [0], app_id_given=False)
    with pytest.raises(UsageError, match="is --sink-app-id the txnAppId"):
        require_commits(sink, [0], app_id_given=True)
    require_commits(sink, [], app_id_given=False)  # nothing completed: nothing to hold
    require_commits(evidence(commit(1, 0)), [0], app_id_given=False)


def test_counts() -> None:
    counts = sink_counts([HELD, HELD, LACKED, UNVERIFIABLE], 3, 5)
    assert (counts.held, counts.lacked, counts.unverifiable) == (2, 1, 1)
    assert (counts.log_first_version, counts.oldest_verifiable_batch) == (3, 5)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sink-app-id", "upsert"], "--sink-app-id needs --sink"),
        (["--sink", "/"], "--sink must name the sink's Delta or Iceberg table"),
    ],
)
def test_sink_options_are_checked_before_anything_starts(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "ledger-import",
        "--checkpoint",
        str(tmp_path),
        "--job",
        "j",
        *set_options(data_dir=tmp_path),
    ]
    assert cli.main([*argv, *extra]) == 2
    assert message in capsys.readouterr().err
