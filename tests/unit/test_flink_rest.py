"""The Flink REST client: Flink's documents read as records, the request pace, the retention warnings."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import FlinkRestError, UsageError
from app.flink.rest import (
    CheckpointConfig,
    FlinkRest,
    JobSummary,
    Pacer,
    newest_by_name,
    parse_checkpoint_config,
    parse_checkpoints,
    parse_config_entries,
    parse_job,
    retention_warnings,
)

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).parent / "flink_rest"


def sample(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text())


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_checkpoint_statistics_are_read_in_id_order_with_the_restore() -> None:
    checkpoints = parse_checkpoints(sample("checkpoints-1.20.json"))

    assert [s.checkpoint_id for s in checkpoints.history] == [2, 8, 9, 10, 11, 12]
    by_id = {s.checkpoint_id: s for s in checkpoints.history}
    assert by_id[11].completed
    assert by_id[11].ack_ms == 1764237611057
    assert by_id[11].trigger_ms == 1764237611000
    assert by_id[11].external_path == "file:/tmp/flink-checkpoints/4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4/chk-11"
    assert by_id[9].failed
    assert by_id[9].ack_ms is None
    assert by_id[9].external_path is None
    assert by_id[8].is_savepoint
    assert by_id[2].discarded
    assert not by_id[12].completed
    assert not by_id[12].failed
    assert checkpoints.restored is not None
    assert (checkpoints.restored.checkpoint_id, checkpoints.restored.restore_ms) == (3, 1764237603500)
    assert not checkpoints.restored.is_savepoint
    assert (checkpoints.completed_count, checkpoints.failed_count) == (10, 1)


def test_latest_completed_counts_even_when_failures_pushed_it_out_of_the_history() -> None:
    doc = sample("checkpoints-1.20.json")
    doc["history"] = [h for h in doc["history"] if h["id"] != 11]

    assert 11 in {s.checkpoint_id for s in parse_checkpoints(doc).history}


def test_a_job_never_restored_and_never_checkpointed() -> None:
    doc = {
        "counts": {"completed": 0, "failed": 0},
        "latest": {"completed": None, "restored": None},
        "history": [],
    }

    checkpoints = parse_checkpoints(doc)

    assert checkpoints.history == ()
    assert checkpoints.restored is None


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"history": "x"},
        {"history": [{"id": 1}]},
        {"history": [], "latest": {"restored": {"id": 3}}},
    ],
)
def test_a_document_not_shaped_as_flink_documents_it_is_a_rest_error(doc: Any) -> None:
    with pytest.raises(FlinkRestError):
        parse_checkpoints(doc)


def test_job_details_and_the_job_to_follow_by_name() -> None:
    job = parse_job(sample("job-1.20.json"))

    assert job == JobSummary("4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4", "payments", "RUNNING", 1764237600000, None)
    old = JobSummary("a" * 32, "payments", "CANCELED", 1764237500000, 1764237590000)
    newer_finished = JobSummary("b" * 32, "payments", "FINISHED", 1764237700000, 1764237800000)
    other = JobSummary("c" * 32, "refunds", "RUNNING", 1764237900000, None)
    assert newest_by_name([old, job, newer_finished, other], "payments") == job  # running first
    assert newest_by_name([old, newer_finished], "payments") == newer_finished
    assert newest_by_name([other], "payments") is None


def test_the_retention_option_is_read_from_the_jobmanager_configuration() -> None:
    entries = parse_config_entries(sample("jobmanager-config-1.20.json"))

    config = parse_checkpoint_config(sample("checkpoints-config-1.20.json"), entries)

    assert config == CheckpointConfig(
        interval_ms=1000,
        externalized=True,
        delete_on_cancellation=False,
        num_retained=3,
        directory="file:/tmp/flink-checkpoints",
    )
    assert retention_warnings(config, poll_s=1.0) == []


def test_a_configuration_that_makes_misses_likely_is_named_at_start() -> None:
    default = CheckpointConfig(
        interval_ms=1000, externalized=False, delete_on_cancellation=True, num_retained=None
    )

    warnings = " | ".join(retention_warnings(default, poll_s=1.0))

    assert "does not set execution.checkpointing.num-retained" in warnings
    assert "RETAIN_ON_CANCELLATION" in warnings
    assert "less than two polls" in warnings
    one = CheckpointConfig(
        interval_ms=60_000, externalized=True, delete_on_cancellation=False, num_retained=1
    )
    assert any("num-retained is 1" in w for w in retention_warnings(one, poll_s=1.0))


def test_the_pacer_lets_at_most_two_requests_through_a_second() -> None:
    clock = FakeClock()
    pacer = Pacer(2.0, clock=clock, sleep=clock.sleep)
    times = []
    for _ in range(9):
        pacer.wait()
        times.append(clock.now)

    assert all(b - a >= 0.5 - 1e-9 for a, b in itertools.pairwise(times))
    assert times[-1] - times[0] == pytest.approx(4.0)
    # In any window of one second, at most two requests.
    assert max(sum(1 for t in times if s <= t < s + 1.0) for s in times) == 2


def test_the_pacer_does_not_sleep_when_requests_are_already_far_apart() -> None:
    clock = FakeClock()
    pacer = Pacer(2.0, clock=clock, sleep=clock.sleep)
    pacer.wait()
    clock.now += 3.0
    pacer.wait()

    assert clock.sleeps == []


def test_every_request_of_the_client_goes_through_the_pacer() -> None:
    clock = FakeClock()
    sent: list[tuple[float, str]] = []

    def opener(url: str, timeout_s: float) -> bytes:
        sent.append((clock.now, url))
        return json.dumps(sample("job-1.20.json")).encode()

    rest = FlinkRest(
        "http://127.0.0.1:8081/", pacer=Pacer(2.0, clock=clock, sleep=clock.sleep), opener=opener
    )
    for _ in range(6):
        rest.job("4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4")

    assert rest.requests == 6
    assert sent[0][1] == "http://127.0.0.1:8081/jobs/4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4"
    assert all(b[0] - a[0] >= 0.5 - 1e-9 for a, b in itertools.pairwise(sent))


def test_an_unreachable_jobmanager_is_a_rest_error_naming_the_url() -> None:
    # A port nothing listens on: the connection is refused at once.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rest = FlinkRest(f"http://127.0.0.1:{port}", timeout_s=2.0)

    with pytest.raises(FlinkRestError, match=f"127.0.0.1:{port}/jobs/overview"):
        rest.jobs()


def test_the_rest_url_must_be_http() -> None:
    with pytest.raises(UsageError):
        FlinkRest("jobmanager:8081")
