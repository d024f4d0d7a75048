"""The local Spark driver JVM dies with the Python process that launched it, whatever phase it is in.

A scheduler that SIGKILLs `offset-audit stream` (a timeout, an OOM killer) must not leave a Spark JVM
behind, re-parented to init, holding memory and the checkpoint's files.

pyspark's own tie is the driver's stdin: the JVM exits when it reads EOF there. That holds only while
no other process keeps the pipe open (a child the driver forked, a helper that inherited it) and only
once the JVM reads its stdin; the second case holds the pipe open from the test, as such a process
would, so only the kernel's parent-death signal can take the JVM down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.kafka.processes import children, cli, command_line, parent_pid, wait_for
from tests.support.streaming import create_topic

pytestmark = pytest.mark.kafka

SPARK_DRIVER = "org.apache.spark.deploy.SparkSubmit"


def spark_driver_child(pid: int) -> int | None:
    """The child of `pid` that is already the Spark driver JVM (spark-submit's shell has exec'd java)."""
    for child in children(pid):
        line = command_line(child)
        if SPARK_DRIVER in line and "java" in line.split(" ", 1)[0]:
            return child
    return None


@pytest.mark.parametrize("stdin_held", [False, True], ids=["stdin-closed", "stdin-held-elsewhere"])
def test_sigkill_during_jvm_start_takes_the_spark_jvm_down(
    bootstrap: str, unique: str, tmp_path: Path, stdin_held: bool
) -> None:
    topic = f"jvm-{unique}"
    create_topic(bootstrap, topic, 1)
    argv = cli(
        "stream",
        tmp_path,
        f"kafka.bootstrap_servers={bootstrap}",
        f"stream.topics=[{topic}]",
        f"stream.group_id=jvm-{unique}",
        "stream.job_name=jvm-job",
        args=("--idle-seconds", "60"),
    )
    with (tmp_path / "stream.log").open("wb") as out:
        # Its own process group, so the cleanup below can reach a surviving JVM even after re-parenting.
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        jvm = wait_for(
            lambda: spark_driver_child(proc.pid) if proc.poll() is None else -1,
            180,
            "the Spark driver JVM to start under the stream process",
        )
        assert jvm > 0, (tmp_path / "stream.log").read_text()[-3000:]
        # A second writer on the driver's stdin pipe: its EOF never comes.
        with open(f"/proc/{jvm}/fd/0", "wb") if stdin_held else contextlib.nullcontext():
            os.kill(proc.pid, signal.SIGKILL)  # the Python parent only, as an OOM killer would
            proc.wait(30)
            wait_for(
                lambda: True if parent_pid(jvm) is None else None,
                120,
                f"the Spark JVM {jvm} to exit after its parent was killed (parent now {parent_pid(jvm)})",
            )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
