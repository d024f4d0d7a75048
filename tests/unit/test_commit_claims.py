"""The one-to-one pairing of the job's claims with the group's commits, where spans overlap."""

from __future__ import annotations

import pytest

from app.reconcile.commit_claims import Candidate, pair_claims
from tests.ledger_data import at

pytestmark = pytest.mark.unit


def candidate(claim: int, claimed: float, commit: int, made: float, exact: bool = True) -> Candidate:
    return Candidate(claim, at(claimed), commit, at(made), exact, commit)


def test_each_claim_takes_the_nearest_commit_at_or_after_its_request_and_no_commit_twice() -> None:
    # Two requests of one offset (10 s, 20 s) and three commits of it: the reset at 30 s stays over.
    pairs = pair_claims(
        [
            candidate(1, 10, 101, 10.5),
            candidate(1, 10, 102, 20.5),
            candidate(1, 10, 103, 30),
            candidate(2, 20, 102, 20.5),
            candidate(2, 20, 103, 30),
        ]
    )
    assert sorted(pairs) == [(1, 101), (2, 102)]


def test_a_commit_stamped_before_the_request_is_taken_only_when_none_follows_it() -> None:
    # Inside the clock skew, a commit stamped 2 s before the request may be the job's; one after wins.
    assert pair_claims([candidate(1, 10, 101, 8), candidate(1, 10, 102, 12)]) == [(1, 102)]
    assert pair_claims([candidate(1, 10, 101, 8)]) == [(1, 101)]


def test_an_exact_offset_wins_over_the_raw_one_and_a_taken_commit_is_no_ones_else() -> None:
    assert pair_claims([candidate(1, 10, 101, 10.5, exact=False), candidate(1, 10, 102, 11)]) == [(1, 102)]
    # Claim 2 could only explain the commit claim 1 already took: it explains nothing.
    assert pair_claims([candidate(1, 10, 101, 10.5), candidate(2, 11, 101, 10.5)]) == [(1, 101)]
