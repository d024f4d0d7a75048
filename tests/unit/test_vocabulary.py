"""The vocabulary unpacks each closed set into its named constants by position, so a set reordered
without its names would silently swap two words; every name must spell the value it holds."""

from __future__ import annotations

import ast
import inspect

import pytest

from app.contracts import vocabulary as vocab

pytestmark = pytest.mark.unit

# Names whose value is not their own spelling, on purpose (CONTRACTS.md section 4 spells these values).
NAMED_OTHERWISE = {
    "RESTART_REPLAYED": "replay",
    "RESTART_SKIPPED": "skip",
    "SKIPPED_DISABLED": "commit_disabled",
}


def unpacked_constants() -> list[tuple[str, str]]:
    """(name, value) of every tuple-unpacking assignment in the module, in source order."""
    pairs: list[tuple[str, str]] = []
    for node in ast.parse(inspect.getsource(vocab)).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            names = [t.id for t in node.targets[0].elts if isinstance(t, ast.Name)]
            pairs += [(n, getattr(vocab, n)) for n in names]
    return pairs


def test_every_unpacked_name_spells_its_value() -> None:
    pairs = unpacked_constants()
    assert len(pairs) > 60  # every closed set is written this way
    wrong = [
        (name, value)
        for name, value in pairs
        if NAMED_OTHERWISE.get(name, value) != value
        or (name not in NAMED_OTHERWISE and not name.endswith(value.upper().replace("-", "_")))
    ]
    assert wrong == []


def test_each_set_holds_its_constants_in_order() -> None:
    assert vocab.SEVERITIES == (vocab.CRITICAL, vocab.ERROR, vocab.WARN, vocab.INFO)
    assert vocab.EVENT_TYPES[0] == vocab.EVENT_RUN_STARTED
    assert vocab.EVENT_TYPES[-1] == vocab.EVENT_RUN_STOPPED
    assert len(set(vocab.FINDING_TYPES)) == len(vocab.FINDING_TYPES) == 17
    assert vocab.SKIPPED_DISABLED == vocab.SKIP_COMMIT_DISABLED
