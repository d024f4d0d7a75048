"""The audit context of one process run: its tables resolved once (with `--sink` applied), its Spark
session started only when a step asks for one, and the broker's one policy for being away: a step
that cannot work without it fails, a confirmation or a completeness lookup fails only when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from pyspark.sql import SparkSession

from app.config import AppConfig
from app.errors import KafkaUnavailableError
from app.kafka.gaps import SuspectedGap
from app.pipeline.context import AuditContext
from tests.support.config import build_config

pytestmark = pytest.mark.unit

AWAY = "kafka.bootstrap_servers is 'local' but no embedded broker runs"


def config(tmp_path: Path) -> AppConfig:
    return build_config(data_dir=tmp_path)


def away() -> str:
    raise KafkaUnavailableError(AWAY)


def test_the_session_starts_when_a_step_first_asks_and_the_tables_are_reached_through_it(
    tmp_path: Path,
) -> None:
    started: list[str] = []
    session = cast(SparkSession, object())

    def start() -> SparkSession:
        started.append("session")
        return session

    cfg = config(tmp_path)
    ctx = AuditContext.create(cfg, cfg.storage, bootstrap=away, session=start)
    assert started == []
    assert ctx.tables.storage is cfg.storage

    assert ctx.spark is session
    assert ctx.spark is session
    assert started == ["session"]  # once per run
    assert ctx.storage is session
    assert ctx.tables.ledger.location == str(tmp_path / "tables" / "ledger")


def test_the_sink_of_every_job_is_the_one_given_on_the_command_line(tmp_path: Path) -> None:
    ctx = AuditContext.create(config(tmp_path), None, bootstrap=away, sink_override=str(tmp_path / "s"))
    assert ctx.tables.sink_for("any-job").location == str(tmp_path / "s")


def test_an_absent_broker_fails_ingest_at_once_and_reconcile_only_where_it_asks(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    broker = AuditContext.create(cfg, None, bootstrap=away).broker

    with pytest.raises(KafkaUnavailableError, match=AWAY):
        broker.reachable()

    confirm = broker.gap_confirmer(cfg.reconcile)
    assert confirm([]) == []
    with pytest.raises(KafkaUnavailableError, match=rf"cannot confirm 1 suspected gap\(s\): {AWAY}"):
        confirm([SuspectedGap("orders", 0, 45, 50)])

    times: Any = broker.source_times(cfg.reconcile)
    assert times.bounds([]) == {}
    assert times.offsets_at([("orders", 0)], []) == {}
    with pytest.raises(KafkaUnavailableError, match=AWAY):
        times.bounds([("orders", 0)])
