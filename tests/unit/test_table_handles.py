"""A table handle binds a table's location, contract, engine and storage once: its writes upsert by
the contract's key, and a row form its engine does not write fails loudly instead of landing."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import pyarrow.compute as pc
import pytest

from app.contracts.tables import FINDINGS_SCHEMA, LEDGER_LAYOUT, SINK_SCHEMA, TABLE_CONTRACTS
from app.routes import DRIVER, SPARK
from app.storage.handles import AuditTables, WrongEngineError
from app.storage.tables import TABLE_NAMES, tables_from_config
from tests.support.config import build_config

pytestmark = pytest.mark.unit

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def tables(tmp_path: Path, *overrides: str) -> AuditTables:
    cfg = build_config(*overrides, data_dir=tmp_path)
    return AuditTables(tables_from_config(cfg), None)


def finding(finding_id: str, severity: str, detected_at: datetime = AT) -> dict[str, object]:
    row: dict[str, object] = {f.name: None for f in FINDINGS_SCHEMA.fields}
    row.update(finding_id=finding_id, reconcile_run_id="rec-1", detected_at=detected_at, finding_type="GAP",
               severity=severity, status="OPEN")  # fmt: skip
    return row


def test_every_table_has_a_contract_and_a_handle_that_carries_it(tmp_path: Path) -> None:
    assert tuple(TABLE_CONTRACTS) == TABLE_NAMES
    audit = tables(tmp_path)
    for name in TABLE_NAMES:
        handle = audit.named(name)
        assert (handle.name, handle.location) == (name, str(tmp_path / "tables" / name))
        assert handle.schema == TABLE_CONTRACTS[name].schema
    assert audit.ledger.layout == LEDGER_LAYOUT
    assert audit.findings.key == ("finding_id",)
    assert (audit.sink.engine, audit.findings.engine, audit.group_commits.engine) == (SPARK, DRIVER, DRIVER)


def test_a_routed_table_takes_its_routes_engine_and_the_others_keep_theirs(tmp_path: Path) -> None:
    audit = tables(tmp_path)
    assert audit.group_commits.on(SPARK).engine == SPARK
    assert audit.decode_errors.on(DRIVER).engine == DRIVER
    assert audit.findings.on(SPARK).engine == DRIVER
    assert audit.sink.on(DRIVER).engine == SPARK


def test_a_jobs_sink_is_its_own_table_else_the_shared_one(tmp_path: Path) -> None:
    audit = tables(tmp_path, "tables.sink_by_job={orders: /elsewhere/orders}")
    assert audit.sink_for("orders").location == "/elsewhere/orders"
    assert audit.sink_for("other").location == str(tmp_path / "tables" / "sink")
    assert audit.sink_for("orders").schema == SINK_SCHEMA


def test_merge_upserts_by_the_contracts_key_and_reads_back(tmp_path: Path) -> None:
    findings = tables(tmp_path).findings
    assert not findings.exists()
    findings.merge([finding("f1", "WARN"), finding("f2", "WARN")])
    findings.merge([finding("f1", "CRITICAL", datetime(2026, 3, 2, tzinfo=UTC))], keep=("detected_at",))
    rows = sorted(findings.read_columns(["finding_id", "severity", "detected_at"]) or [], key=str)
    assert [(r["finding_id"], r["severity"], r["detected_at"]) for r in rows] == [
        ("f1", "CRITICAL", AT),
        ("f2", "WARN", AT),
    ]
    assert findings.version() == 2  # created, then one commit per merge
    only = findings.rows(pc.field("severity") == "CRITICAL", columns=["finding_id", "severity"])
    assert only is not None
    assert only.column("finding_id").to_pylist() == ["f1"]
    assert findings.delete("finding_id", ["f2"]) == 1


def test_a_row_form_the_engine_does_not_write_is_refused(tmp_path: Path) -> None:
    audit = tables(tmp_path)
    with pytest.raises(WrongEngineError, match=r"sink needs the driver engine; .* written by the spark"):
        audit.sink.append([{"kafka_topic": "t", "kafka_partition": 0, "kafka_offset": 1}])
    with pytest.raises(WrongEngineError, match="a merge of table sink"):
        audit.sink.merge([])
    with pytest.raises(WrongEngineError, match="no key"):
        audit.partition_summary.merge([])
    with pytest.raises(WrongEngineError, match="needs a Spark session"):
        audit.findings.scan()
    assert not audit.sink.exists()  # nothing was written by the refused calls


# --- the house rules the handles keep: one resolution, no table handed around in pieces -------------

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "app" / "storage"
# The modules that run a table's operations by location: outside app.storage a table is reached
# through its handle (`storage.handles`), which binds the pieces once.
BY_LOCATION: Final = frozenset({"app.storage.facade", "app.storage.delta_rows", "app.storage.maintenance"})


def app_sources() -> list[Path]:
    return [p for package in ("app", "jobs", "checks") for p in sorted((ROOT / package).rglob("*.py"))]


def calls(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, owner, name) of every `owner.name(...)` and `name(...)` call (owner "" for the latter)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                out.append((node.lineno, node.func.value.id, node.func.attr))
            elif isinstance(node.func, ast.Name):
                out.append((node.lineno, "", node.func.id))
    return out


def test_table_locations_are_resolved_in_one_place() -> None:
    resolving = sorted(
        str(path.relative_to(ROOT))
        for path in app_sources()
        if any(name == "tables_from_config" for _, _, name in calls(ast.parse(path.read_text())))
    )
    assert resolving == ["app/storage/handles.py"]


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import, `from app.storage import facade` as app.storage.facade."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def test_no_module_outside_storage_reaches_a_table_by_its_location() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in app_sources()
        if STORAGE not in path.parents
        for line, module in imported(ast.parse(path.read_text()))
        if module in BY_LOCATION
    ]
    assert offenders == []
