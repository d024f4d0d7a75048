"""Every Delta write goes through `app.storage`: no module outside it imports a Delta library or
calls Spark's Delta writer, so the engine of each table is chosen in one place (`facade.engine_for`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.routes import DRIVER, SPARK
from app.storage.facade import engine_for
from app.storage.tables import TABLE_NAMES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "app" / "storage"
DELTA_LIBRARIES = ("deltalake", "delta")
# errors classifies delta-rs's exceptions as infrastructure failures: it imports nothing of the
# application (every module raises its errors), so it cannot ask storage for them.
ALLOWED = {("app/errors.py", "deltalake.exceptions")}
WRITERS = ("write", "writeStream")


def sources() -> list[Path]:
    return [
        p
        for package in ("app", "jobs", "checks")
        for p in sorted((ROOT / package).rglob("*.py"))
        if STORAGE not in p.parents
    ]


def delta_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.split(".")[0] in DELTA_LIBRARIES]


def delta_writes(tree: ast.AST) -> list[int]:
    """Lines of `<df>.write.format("delta")` (or writeStream), `saveAsTable` and `insertInto`."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        is_delta_format = (
            func.attr == "format"
            and any(isinstance(a, ast.Constant) and a.value == "delta" for a in node.args)
            and isinstance(func.value, ast.Attribute)
            and func.value.attr in WRITERS
        )
        if is_delta_format or func.attr in ("saveAsTable", "insertInto"):
            lines.append(node.lineno)
    return lines


def test_no_module_outside_storage_imports_a_delta_library() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sources()
        for line, name in delta_imports(ast.parse(path.read_text()))
        if (str(path.relative_to(ROOT)), name) not in ALLOWED
    ]
    assert offenders == []


def test_no_module_outside_storage_reaches_past_the_facade_to_delta_rows() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (
            node.module == "app.storage.delta_rows"
            or (node.module == "app.storage" and any(a.name == "delta_rows" for a in node.names))
        )
    ]
    assert offenders == []


def test_no_module_outside_storage_writes_delta_through_spark() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources()
        for line in delta_writes(ast.parse(path.read_text()))
    ]
    assert offenders == []


def delta_reads(tree: ast.AST) -> list[int]:
    """Lines of `<session>.read.format("delta")` (or readStream)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and any(isinstance(a, ast.Constant) and a.value == "delta" for a in node.args)
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr in ("read", "readStream")
    ]


def test_no_module_outside_storage_reads_delta_through_spark_but_by_the_facade() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources()
        for line in delta_reads(ast.parse(path.read_text()))
    ]
    assert offenders == []


def test_the_engine_of_every_table_is_decided_by_its_role() -> None:
    assert {t: engine_for(t) for t in TABLE_NAMES} == {
        t: SPARK if t == "sink" else DRIVER for t in TABLE_NAMES
    }
    # The decoded tables follow the decode route; the sink and the audit tables do not.
    for route in (DRIVER, SPARK):
        assert engine_for("group_commits", route) == route
        assert engine_for("decode_errors", route) == route
        assert engine_for("sink", route) == SPARK
        assert engine_for("findings", route) == DRIVER
    with pytest.raises(ValueError, match="no table called"):
        engine_for("ledgers")
