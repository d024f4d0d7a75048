"""The Flink jobs `watch` follows: `watch.flink_jobs` validated at load, naming the wrong key; the
follow step first in a cycle when there are any; a follower's thread that a cycle waits for (a poll
begun after the cycle asked) and that stops with its owner. The sidecar's poll is a stand-in here:
the real one runs against a real Flink job in tests/flink/test_watch_flink.py."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from app.config import load_config
from app.contracts import vocabulary as vocab
from app.errors import ConfigError, FlinkRestError, UsageError
from app.flink.follower import FlinkFollower
from app.pipeline.context import AuditContext
from app.runtime.signals import StopSignal
from app.watch.loop import FOLLOW_FLINK, Cycle, Watch

pytestmark = pytest.mark.unit

GOOD = {"rest": "http://jobmanager:8081", "job_name": "orders", "job": "flink-orders", "group_id": "g"}


def flink_jobs(*jobs: dict[str, Any]) -> str:
    return f"watch.flink_jobs={json.dumps(list(jobs))}"


def test_a_followed_flink_job_is_read_from_config() -> None:
    cfg = load_config("local", overrides=[flink_jobs({**GOOD, "poll_s": 0.5})], environ={})
    (job,) = cfg.watch.flink_jobs
    assert (job.rest, job.job_name, job.job_id, job.job, job.group_id, job.poll_s) == (
        "http://jobmanager:8081",
        "orders",
        None,
        "flink-orders",
        "g",
        0.5,
    )
    assert load_config("local", overrides=[], environ={}).watch.flink_jobs == []


@pytest.mark.parametrize(
    ("job", "named"),
    [
        ({**GOOD, "jobname": "x"}, r"'watch\.flink_jobs\[0\]\.jobname': unknown key"),
        ({**GOOD, "rest": "jobmanager:8081"}, r"'watch\.flink_jobs\[0\]\.rest': must be an http"),
        ({k: v for k, v in GOOD.items() if k != "job"}, r"'watch\.flink_jobs\[0\]\.job': required"),
        ({**GOOD, "job_id": "abc"}, r"'watch\.flink_jobs\[0\]\.job_id': set job_id or job_name"),
        ({k: v for k, v in GOOD.items() if k != "job_name"}, r"'watch\.flink_jobs\[0\]\.job_id': set"),
        ({**GOOD, "poll_s": 0}, r"'watch\.flink_jobs\[0\]\.poll_s': must be a positive"),
        ({**GOOD, "starting_offsets": "newest"}, r"'watch\.flink_jobs\[0\]\.starting_offsets': must be"),
    ],
)
def test_a_wrong_flink_job_fails_at_load_naming_its_key(job: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config("local", overrides=[flink_jobs(job)], environ={})


def test_a_job_followed_twice_fails_at_load() -> None:
    with pytest.raises(ConfigError, match=r"'watch\.flink_jobs\[1\]\.job': 'flink-orders' is followed twice"):
        load_config("local", overrides=[flink_jobs(GOOD, GOOD)], environ={})


def watch_of(*overrides: str) -> Watch:
    cfg = load_config("local", overrides=list(overrides), environ={})
    ctx = AuditContext.create(cfg, None, bootstrap=lambda: "unused:9092")
    return Watch(ctx, 1.0, StopSignal(), lambda _line: None)


def test_following_flink_is_the_first_step_of_a_cycle_when_jobs_are_given() -> None:
    assert [name for name, _ in watch_of(flink_jobs(GOOD)).steps][:2] == [FOLLOW_FLINK, "ingest-offsets"]
    assert FOLLOW_FLINK not in [name for name, _ in watch_of().steps]


class _Watcher:
    """The sidecar's watcher as the follower drives it: each poll blocks until the test lets it end."""

    poll_s = 0.01

    def __init__(self, first_contact: list[Exception] | None = None) -> None:
        self.begun = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.polls = 0
        self.fail_next = False
        self.first_contact = first_contact or []  # what the first contacts raise, one each
        self.contacts = 0
        self.rest = type("Rest", (), {"base_url": "http://jobmanager:8081"})()

    def start(self, _wait_s: float, _stop: object) -> list[str]:
        self.contacts += 1
        if self.first_contact:
            raise self.first_contact.pop(0)
        return ["retain more checkpoints"]

    def poll_once(self) -> bool:
        self.begun.release()
        assert self.release.acquire(timeout=60), "the test never let the poll end"
        self.polls += 1
        if self.fail_next:
            self.fail_next = False
            raise OSError("the ledger is away")
        return False


class _Sidecar:
    def __init__(self, watcher: _Watcher | None = None) -> None:
        self.watcher = watcher or _Watcher()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_cycle_waits_for_a_poll_begun_after_it_asked_and_the_follower_stops_with_its_owner() -> None:
    sidecar = _Sidecar()
    follower = FlinkFollower(sidecar, "flink-orders")  # type: ignore[arg-type]
    assert follower.start() is follower
    watcher = sidecar.watcher
    assert watcher.begun.acquire(timeout=60)  # poll 1 is in progress when the cycle asks
    asked: list[bool] = []
    waiter = threading.Thread(target=lambda: asked.append(follower.caught_up(60)))
    waiter.start()
    watcher.release.release()  # poll 1 ends: it began before the cycle asked, not enough
    assert watcher.begun.acquire(timeout=60)  # poll 2 began
    assert asked == []
    watcher.fail_next = True
    watcher.release.release()  # poll 2 ends, failed: the cycle is told
    waiter.join(60)
    assert asked == [True]
    assert follower.error is not None
    assert "the ledger is away" in follower.error
    assert watcher.begun.acquire(timeout=60)
    watcher.release.release()  # poll 3 succeeds: the error is gone
    assert watcher.begun.acquire(timeout=60)
    assert follower.error is None
    assert not follower.caught_up(0.05)  # poll 4 holds: no poll begun after asking has ended

    closing = threading.Thread(target=follower.close)
    closing.start()
    watcher.release.release()  # the poll in progress ends; no poll begins after the stop
    closing.join(60)
    assert not closing.is_alive()
    assert sidecar.closed
    assert watcher.polls == 4
    assert follower.caught_up(0.05)  # a closed follower is never waited for


def test_a_jobmanager_not_answering_yet_is_asked_again_at_each_poll_and_fails_no_cycle() -> None:
    watcher = _Watcher([FlinkRestError("http://jobmanager:8081 refused"), FlinkRestError("refused")])
    follower = FlinkFollower(_Sidecar(watcher), "flink-orders").start()  # type: ignore[arg-type]
    try:
        watcher.release.release()  # the first poll that reaches it
        assert follower.caught_up(60)
        assert follower.error is None
        assert watcher.begun.acquire(timeout=60)  # polled once the third contact answered
        assert watcher.contacts == 3
        assert follower.connected
    finally:
        watcher.release.release()
        follower.close()


def test_an_unknown_job_id_ends_the_follower_with_its_usage_error() -> None:
    watcher = _Watcher([UsageError("the JobManager at http://jobmanager:8081 knows no job abc")])
    follower = FlinkFollower(_Sidecar(watcher), "flink-orders").start()  # type: ignore[arg-type]
    try:
        assert follower.caught_up(60)
        assert isinstance(follower.usage_error, UsageError)
        assert not follower.connected
        assert watcher.polls == 0
    finally:
        follower.close()


def test_a_cycle_line_says_what_its_flink_jobs_recorded() -> None:
    cycle = Cycle(3, "watch-1", datetime(2026, 1, 1, tzinfo=UTC))
    cycle.summaries[FOLLOW_FLINK] = {
        "a": {"followed": True, vocab.DETAIL_CHECKPOINTS_RECORDED: 5, "missed": 1},
        "b": {"followed": False, vocab.DETAIL_CHECKPOINTS_RECORDED: 0, "missed": 0},
    }
    assert "Flink jobs followed 1/2 checkpoints recorded 5 missed 1, 0.0s" in cycle.line()
    assert "Flink" not in Cycle(4, "watch-2", datetime(2026, 1, 1, tzinfo=UTC)).line()
