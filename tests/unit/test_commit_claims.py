"""The one-to-one pairing of the job's claims with the group's commits, where spans overlap."""

from __future__ import annotations

import pytest

from app.reconcile.ledger.commit_claims import Candidate, pair_claims
from tests.support.ledger_data import at

pytestmark = pytest.mark.unit

SPAN_S = 60  # how long after its request a claim explains a commit, in these cases


def candidate(
    claim: int, claimed: float, commit: int, made: float, *, exact: bool = True, span: float = SPAN_S
) -> Candidate:
    return Candidate(claim, at(claimed), at(claimed + span), commit, at(made), exact, commit)


def test_each_claim_explains_one_commit_and_a_commit_one_claim() -> None:
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
    assert pairs == [(1, 101), (2, 102)]


def test_a_commit_stamped_before_the_request_is_taken_only_when_none_follows_it() -> None:
    # Inside the clock skew, a commit stamped 2 s before the request may be the job's; one after wins.
    assert pair_claims([candidate(1, 10, 101, 8), candidate(1, 10, 102, 12)]) == [(1, 102)]
    assert pair_claims([candidate(1, 10, 101, 8)]) == [(1, 101)]


def test_an_idle_partition_under_a_skewed_broker_clock_pairs_each_request_with_its_own_commit() -> None:
    """A partition with no new records commits the same offset with every checkpoint (every 2 s),
    and the broker's clock is 3 s behind the job's, inside the 5 s allowance: every commit is
    stamped before its request, and the next request's commit after it. Each request still
    explains its own commit, and none is left over."""
    requests = {claim: 2.0 * claim for claim in range(1, 9)}
    commits = {100 + claim: t + 0.1 - 3 for claim, t in requests.items()}
    listed = [
        candidate(claim, t, commit, made, span=5.2)
        for claim, t in requests.items()
        for commit, made in commits.items()
        if t - 5 <= made <= t + 5.2
    ]
    assert pair_claims(listed) == [(claim, 100 + claim) for claim in requests]


def test_an_exact_offset_wins_over_the_raw_one_and_a_taken_commit_is_no_ones_else() -> None:
    assert pair_claims([candidate(1, 10, 101, 10.5, exact=False), candidate(1, 10, 102, 11)]) == [(1, 102)]
    # Claim 2 could only explain the commit claim 1 already took: it explains nothing.
    assert pair_claims([candidate(1, 10, 101, 10.5), candidate(2, 11, 101, 10.5)]) == [(1, 101)]
