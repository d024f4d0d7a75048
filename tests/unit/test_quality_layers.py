"""The check's layers depend downward only: the suites know the tables' vocabulary and nothing else
of the application, and the dashboard finds the check's outputs without importing the check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top, inside functions or under TYPE_CHECKING alike."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def app_imports(paths: list[Path]) -> dict[str, set[str]]:
    return {
        str(p.relative_to(ROOT)): {m for m in imported_modules(p) if m == "app" or m.startswith("app.")}
        for p in paths
    }


def test_the_suites_depend_on_the_contracts_only() -> None:
    imports = app_imports(sorted((ROOT / "checks").glob("*.py")))

    assert {f: {m for m in mods if not m.startswith("app.contracts")} for f, mods in imports.items()} == {
        f: set() for f in imports
    }


def test_the_dashboard_does_not_import_the_check() -> None:
    imports = app_imports(sorted((ROOT / "app" / "report").glob("*.py")))

    assert {f: {m for m in mods if m.startswith("app.quality")} for f, mods in imports.items()} == {
        f: set() for f in imports
    }
