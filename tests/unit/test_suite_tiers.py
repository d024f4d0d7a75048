"""Every test file names its tier, so each test runs in exactly the runs that can host it.

`pytest -m unit` (`make test-fast`) selects by marker: a test without a tier marker runs in no tier's
run, only in `make test`, and so is missed by the edit loop and the tier runs alike. The tier goes in
the module's ``pytestmark``, where a reader sees it first; the files under tests/unit/ are the unit
tier's (pure Python, no JVM) and carry its marker.
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


def test_the_files_under_unit_are_the_unit_tier() -> None:
    units = [p for p in TEST_FILES if p.parent == TESTS / "unit"]
    assert units
    wrong = {str(p.relative_to(TESTS)): sorted(module_marks(p) & TIERS) for p in units}
    assert {name: tiers for name, tiers in wrong.items() if tiers != ["unit"]} == {}
