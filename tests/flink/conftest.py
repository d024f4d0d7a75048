"""Fixtures for the Flink tier: the stacks' compiled test programs and Flink jobs that are always torn down.

A job is a MiniCluster JVM (see harness.py); its logs go to ``flink.log`` in the job's work dir, never
to the console. Tests that share one job build a module-scoped fixture on ``FlinkJob`` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.config import AppConfig
from tests.flink.harness import FlinkJob, FlinkStack, JobSpec, compile_stack


@pytest.fixture(scope="session")
def flink_stacks(app_config: AppConfig) -> Callable[[str], FlinkStack]:
    """'1.20', '2.2' or '1.20-iceberg' -> that stack, its test programs compiled on first use (cached
    across sessions)."""
    compiled: dict[str, FlinkStack] = {}

    def get(name: str) -> FlinkStack:
        if name not in compiled:
            compiled[name] = compile_stack(name, app_config.paths.cache_dir.expanduser())
        return compiled[name]

    return get


@pytest.fixture
def flink_job(flink_stacks: Callable[[str], FlinkStack], tmp_path: Path) -> Iterator[Callable[..., FlinkJob]]:
    """Start a job: ``flink_job(stack, spec)``; every process it (or a restart of it) started dies
    at teardown."""
    started: list[FlinkJob] = []

    def start(stack: str, spec: JobSpec, name: str = "job") -> FlinkJob:
        job = FlinkJob(flink_stacks(stack), spec, tmp_path / name, on_start=started.append)
        return job.start()

    yield start
    for job in started:
        job.stop()
