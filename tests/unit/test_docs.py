"""The contracts the code cites are in the repository: CONTRACTS.md, by its own section numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "CONTRACTS.md"
CITATION = re.compile(r"CONTRACTS\.md,? sections? (\d+)(?:(?:-| and |, )(\d+))?")
# A design document outside the repository, which code and docs used to cite.
OUTSIDE = re.compile(r"shared/DESIGN\.md|\bDESIGN(?:'s| sections?\b)")

# Files another branch of the same change rewrites, still citing the outside document: that branch.
PENDING = {"app/quality/checks.py": "quality", "app/offsets_topic/ingest.py": "ingest"}


def repo_texts() -> dict[str, str]:
    """The repository's own text files: the docs at its root and everything under its packages."""
    paths = [ROOT / n for n in ("README.md", "ARCHITECTURE.md", "CONTRACTS.md", "Makefile", "pyproject.toml")]
    for top in ("app", "checks", "jobs", "tests", "bench", "conf"):
        paths += [p for p in (ROOT / top).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".html", ".js"}]
    return {p.relative_to(ROOT).as_posix(): p.read_text(errors="replace") for p in paths if p.is_file()}


def contract_sections() -> set[int]:
    return {int(m) for m in re.findall(r"^## (\d+)\. ", CONTRACTS.read_text(), re.MULTILINE)}


def test_nothing_cites_a_design_document_outside_the_repository() -> None:
    cited = [
        f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for name, text in repo_texts().items()
        if name not in PENDING
        for m in OUTSIDE.finditer(text)
    ]
    assert not cited, "cite CONTRACTS.md instead:\n" + "\n".join(cited)


def test_every_cited_section_of_contracts_md_exists() -> None:
    sections = contract_sections()
    assert sections == set(range(1, 8))
    wrong = [
        f"{name}: {m.group(0)}"
        for name, text in repo_texts().items()
        for m in CITATION.finditer(text)
        if not {int(n) for n in m.groups() if n} <= sections
    ]
    assert not wrong, wrong
