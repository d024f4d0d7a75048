"""Which of the job's claims explains which group commit, when the time spans of several claims
hold several commits of the same offset (CONTRACTS.md section 5, "the job's own commit").

A claim is one commit attempt of one partition: its request and acknowledgement together (or a
recovered completion the dead run may have sent). One attempt is one OffsetCommit call, so it
explains at most one commit, and a commit is explained by at most one claim: a reset of the group
to the very offset the job commits next must stay foreign. ``ledger_audit.ensure_matched`` pairs in
SQL the claims and commits that have a single candidate on both sides (nearly all of them) and
hands the rest here. Pure: no database, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple


class Candidate(NamedTuple):
    """A commit that claim ``claim_row`` could explain: same partition, an offset the claim carries,
    made inside the claim's time span."""

    claim_row: int
    claimed_at: datetime  # the request's time (the acknowledgement's when no request is recorded)
    commit_row: int
    commit_time: datetime
    exact: bool  # the offset requested or acknowledged, not the request's raw offset
    log_offset: int | None  # the commit's place in __consumer_offsets: ties broken by log order


def _preference(c: Candidate) -> tuple[bool, bool, float, int]:
    """Of one claim's candidates, the one it explains: an exact offset before a raw one, then the
    nearest commit at or after the request, then the nearest before it (inside the clock skew,
    which can stamp the broker's commit before the job's request)."""
    gap = (c.commit_time - c.claimed_at).total_seconds()
    return (not c.exact, gap < 0, abs(gap), -1 if c.log_offset is None else c.log_offset)


def pair_claims(candidates: Iterable[Candidate]) -> list[tuple[int, int]]:
    """(claim_row, commit_row) pairs, each claim and each commit at most once.

    Claims take their commit in the order they were made (by ``claimed_at``, then row): each the
    commit it prefers (``_preference``) among those no earlier claim took. Time-ordered like the
    commits themselves, so a job's consecutive requests of one offset explain its consecutive
    commits of it, and a commit nobody's span holds once the others are taken stays foreign.
    """
    by_claim: dict[int, list[Candidate]] = {}
    for c in candidates:
        by_claim.setdefault(c.claim_row, []).append(c)
    order = sorted(by_claim, key=lambda row: (by_claim[row][0].claimed_at, row))
    taken: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for claim_row in order:
        free = [c for c in by_claim[claim_row] if c.commit_row not in taken]
        if free:
            best = min(free, key=_preference)
            taken.add(best.commit_row)
            pairs.append((claim_row, best.commit_row))
    return pairs
