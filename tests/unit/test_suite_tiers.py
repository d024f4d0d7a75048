"""Every test file names its tier, so each test runs in exactly the runs that can host it.

`pytest -m unit` (`make test-fast`) selects by marker: a test without a tier marker runs in no tier's
run, only in `make test`, and so is missed by the edit loop and the tier runs alike. The tier goes in
the module's ``pytestmark``, where a reader sees it first. The unit tier (pure Python, no JVM) is
exactly the files under tests/unit/, so `make test-fast` collects that directory alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]
# The markers that choose where a test can run (pyproject's [tool.pytest.ini_options] markers).
TIERS = frozenset({"unit", "spark", "kafka", "flink", "cluster", "browser"})


def module_marks(path: Path) -> set[str]:
    """The ``pytest.mark.<name>`` names in the module-level ``pytestmark`` of ``path``."""
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return {
                sub.attr
                for sub in ast.walk(node.value)
                if isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark"
            }
    return set()


TEST_FILES = sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_names_its_tier() -> None:
    unmarked = [str(p.relative_to(TESTS)) for p in TEST_FILES if not module_marks(p) & TIERS]
    assert unmarked == []


def test_the_unit_tier_is_the_files_under_unit() -> None:
    tiers = {str(p.relative_to(TESTS)): sorted(module_marks(p) & TIERS) for p in TEST_FILES}
    under_unit = {name for name in tiers if name.startswith("unit/")}
    assert under_unit
    assert {name: found for name, found in tiers.items() if (found == ["unit"]) != (name in under_unit)} == {}


def imported_test_modules(path: Path) -> set[str]:
    """The ``test_*`` modules that ``path`` imports (``from tests.x.test_y import ...``,
    ``from tests.x import test_y``, ``import tests.x.test_y``, relative forms alike)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            modules = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {m for m in modules if m.rsplit(".", 1)[-1].startswith("test_")}
    return found


def test_no_module_imports_a_test_module() -> None:
    # A helper two test files share lives in tests/support/: importing a test module runs its
    # collection-time code and ties one file's tests to another's edits.
    importers = {
        str(p.relative_to(TESTS)): sorted(imported)
        for p in sorted(TESTS.rglob("*.py"))
        if (imported := imported_test_modules(p))
    }
    assert importers == {}
