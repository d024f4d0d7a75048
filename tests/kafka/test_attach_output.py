"""What an attached audit leaves in the user's job output: nothing (real broker, Spark, Delta).

The job is the user's own driver process (`user_job_main`), attached with a consumer group whose
commit client points at a closed loopback port, so the commits fail and librdkafka has connection
errors to report. An application that configures no logging sees none of the library's lines on
its stdout or stderr; one that configures logging gets them as records of the library's named
loggers (`app.*` and `librdkafka`).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.kafka.clients import LIBRDKAFKA_LOGGER
from tests.kafka.user_jobs import JOB, PARTITIONS, PER_TRIGGER, QUERY_TIMEOUT_S, produce_payments
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

# The commits go to a closed port: each waits this long for its answer, and the run's end as long
# for the last one (30 s each by default).
COMMIT_TIMEOUT_S = 5.0
# What differs between two runs of one message: ids, numbers, ports, times.
_VARYING = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d+")


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def driver(bootstrap: str, topic: str, root: Path, commit_to: str, log: Path | None) -> subprocess.Popen[str]:
    """The user's job, attached with a group, reading what ``topic`` holds and ending."""
    args = [bootstrap, topic, str(root / "cp"), str(root / "sink"), str(root / "ledger"), JOB]
    args += [str(root / "driver"), "a", "--to-end", "--group", f"{JOB}-group", "--commit-to", commit_to]
    args += ["--commit-timeout", str(COMMIT_TIMEOUT_S)]
    args += [] if log is None else ["--log", str(log)]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.user_job_main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def shape(text: str) -> str:
    return _VARYING.sub("#", text)


def test_an_attached_job_prints_nothing_of_the_library_and_logs_through_named_loggers(
    bootstrap: str, unique: str, tmp_path: Path
) -> None:
    topic = f"pay-o-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_payments(bootstrap, topic, PER_TRIGGER)
    commit_to = f"127.0.0.1:{closed_port()}"
    log = tmp_path / "app.log"

    # The two applications run side by side: each waits out its failing commit.
    quiet = driver(bootstrap, topic, tmp_path / "quiet", commit_to, None)
    logged = driver(bootstrap, topic, tmp_path / "logged", commit_to, log)
    quiet_out, quiet_err = quiet.communicate(timeout=QUERY_TIMEOUT_S)
    logged.communicate(timeout=QUERY_TIMEOUT_S)
    assert (quiet.returncode, logged.returncode) == (0, 0), quiet_err

    records = [line.split("|", 2) for line in log.read_text().splitlines() if line.count("|") >= 2]
    ours = [(name, message) for name, _, message in records if name.startswith("app.")]
    librdkafka = [message for name, _, message in records if name == LIBRDKAFKA_LOGGER]
    assert any(name == "app.attach" for name, _ in ours), records
    assert librdkafka, records  # the closed port's connection errors, as records

    printed = shape(quiet_out + quiet_err)
    assert "rdkafka" not in printed
    for _, message in [*ours, *((LIBRDKAFKA_LOGGER, m) for m in librdkafka)]:
        assert shape(message)[:80] not in printed
