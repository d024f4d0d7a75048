"""The real CLI against an address where no broker listens: exit 3 within about
kafka.request_timeout_s, one clear line, no raw librdkafka output, and Spark never started."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.kafka.processes import cli
from tests.support.stderr import RAW_LIBRDKAFKA

pytestmark = pytest.mark.kafka

NOBODY = "127.0.0.1:1"  # a privileged port nothing listens on: connections are refused at once
# What a started Spark driver prints or logs, whichever comes first.
SPARK_SIGNS = ("SparkSession", "log4j", "SparkContext", "NativeCodeLoader")


@pytest.mark.parametrize("command", ["stream", "ingest-offsets"])
def test_unreachable_broker_fails_fast_and_quietly_before_spark(command: str, tmp_path: Path) -> None:
    argv = cli(
        command,
        tmp_path,
        f"kafka.bootstrap_servers={NOBODY}",
        "kafka.request_timeout_s=5",
        "ingest.groups=[audited]",
    )
    started = time.monotonic()
    # The timeout only keeps a regression from hanging the session; the bound is asserted below.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.monotonic() - started

    assert done.returncode == 3, done.stderr[-3000:]
    assert not RAW_LIBRDKAFKA.search(done.stderr), done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("offset-audit: infrastructure error:")
    assert NOBODY in lines[0]
    assert "did not answer within 5s" in lines[0]
    assert not any(sign in done.stderr + done.stdout for sign in SPARK_SIGNS), done.stderr[-3000:]
    assert not (tmp_path / "checkpoints").exists()  # the job never got as far as its checkpoint
    assert elapsed < 60, f"took {elapsed:.0f}s"
