"""`maintain` with the sink included leaves an Iceberg sink to its owner, and says so (issue 38):
a distinct outcome in the JSON and the text, never "no table yet"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.config import AppConfig
from app.maintenance.run import OWNERS_UPKEEP, maintain, summary_text
from tests.support.config import build_config

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)


def config(tmp_path: Path, sink: str) -> AppConfig:
    return build_config(
        f"tables.sink={sink}",
        "maintenance.include_sink=true",
        "iceberg.catalogs.lake.type=hadoop",
        f"iceberg.catalogs.lake.warehouse={tmp_path / 'wh'}",
        data_dir=tmp_path / "audit",
    )


def test_an_iceberg_sink_is_skipped_as_its_owners_upkeep(tmp_path: Path) -> None:
    cfg = config(tmp_path, "iceberg:lake.db.payments")
    result = maintain(cfg.storage, cfg, NOW, only=["sink"])
    (sink,) = result.to_json()["tables"]
    assert (sink["table"], sink["skipped"], sink["missing"]) == ("sink", OWNERS_UPKEEP, False)
    assert "Iceberg" in OWNERS_UPKEEP
    assert "owner" in OWNERS_UPKEEP
    text = summary_text(result)
    assert f"skipped: {OWNERS_UPKEEP}" in text
    assert "no table yet" not in text


def test_a_delta_sink_not_written_yet_is_still_no_table_yet(tmp_path: Path) -> None:
    cfg = config(tmp_path, str(tmp_path / "sink"))
    result = maintain(cfg.storage, cfg, NOW, only=["sink"])
    (sink,) = result.to_json()["tables"]
    assert (sink["skipped"], sink["missing"]) == (None, True)
    assert "no table yet" in summary_text(result)
