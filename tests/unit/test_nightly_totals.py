"""A night's totals from its steps: the findings of incidents a repair resolved are counted but fail
no night (`nightly --fail-on`), as they fail no `reconcile`."""

from __future__ import annotations

import pytest

from app.contracts import vocabulary as vocab
from app.nightly.run import STEP_DONE, NightlyResult, StepOutcome, collect_steps

pytestmark = pytest.mark.unit


def test_the_findings_of_a_resolved_incident_fail_no_night() -> None:
    reconcile = StepOutcome(
        vocab.COMMAND_RECONCILE,
        STEP_DONE,
        summary={
            "counts": [[vocab.RESTART_SKIP, vocab.CRITICAL, 4], [vocab.GAP, vocab.CRITICAL, 1]],
            "settled": [[vocab.RESTART_SKIP, vocab.CRITICAL, 4]],  # a repaired restart's
        },
    )
    result = NightlyResult("night-1", "2026-03-02T02:00:00+00:00", steps=[reconcile])

    collect_steps(result)

    assert result.findings == {vocab.CRITICAL: 1}  # the new gap alone
    assert result.failing(vocab.CRITICAL) == 1
    reconcile.summary["counts"] = [[vocab.RESTART_SKIP, vocab.CRITICAL, 4]]
    result.findings = {}
    collect_steps(result)
    assert result.failing(vocab.CRITICAL) == 0
