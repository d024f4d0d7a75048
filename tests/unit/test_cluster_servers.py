"""The cluster tier's clean-up: the jars every executor copied into its work dir go when the cluster
stops, the executors' logs and everything else under the tier's directory stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.servers import remove_executor_jars

pytestmark = pytest.mark.unit


def test_the_executors_copies_of_the_jars_go_and_their_logs_stay(tmp_path: Path) -> None:
    copies = [
        tmp_path / "worker-0" / "app-20260301120000-0000" / "0" / "bundle-2.29.52.jar",
        tmp_path / "worker-1" / "app-20260301120000-0000" / "1" / "delta-spark_4.1_2.13-4.4.0.jar",
        tmp_path / "worker-1" / "app-20260301120100-0001" / "3" / "kafka-clients-3.9.1.jar",
    ]
    kept = [
        tmp_path / "worker-0" / "app-20260301120000-0000" / "0" / "stderr",
        tmp_path / "worker-0" / "app-20260301120000-0000" / "0" / "offset_audit.zip",
        tmp_path / "dist" / "offset_audit.jar",  # not an executor's copy
        tmp_path / "logs" / "worker-0.log",
    ]
    for path in copies + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")

    assert remove_executor_jars(tmp_path) == len(copies)
    assert [p for p in copies if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []
    assert remove_executor_jars(tmp_path) == 0  # a second stop finds nothing left
