"""Which of the job's claims explains which group commit, when the time spans of several claims
hold several commits of the same offset (CONTRACTS.md section 5, "the job's own commit").

A claim is one commit attempt of one partition: its request and acknowledgement together (or a
recovered completion the dead run may have sent). One attempt is one OffsetCommit call, so it
explains at most one commit, and a commit is explained by at most one claim: a reset of the group
to the very offset the job commits next must stay foreign. ``audit.LedgerAudit.ensure_matched`` pairs in
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
    span_end: datetime  # the latest commit time the claim can explain
    commit_row: int
    commit_time: datetime
    exact: bool  # the offset requested or acknowledged, not the request's raw offset
    log_offset: int | None  # the commit's place in __consumer_offsets: ties broken by log order


def _log_order(c: Candidate) -> int:
    return -1 if c.log_offset is None else c.log_offset


def _preference(c: Candidate) -> tuple[bool, bool, float, int]:
    """Of one claim's candidates, the one it rather explains: an exact offset before a raw one,
    then the nearest commit at or after the request, then the nearest before it (inside the clock
    skew, which can stamp the broker's commit before the job's request)."""
    gap = (c.commit_time - c.claimed_at).total_seconds()
    return (not c.exact, gap < 0, abs(gap), _log_order(c))


def pair_claims(candidates: Iterable[Candidate]) -> list[tuple[int, int]]:
    """(claim_row, commit_row) pairs, each claim and each commit at most once.

    First as many pairs as the spans allow: the commits in the order they were made, each taking
    the free claim whose span ends first (an exact offset before a raw one). Order-preserving, so a
    constant skew between the job's and the broker's clocks pairs a job's consecutive requests of
    one offset (an idle partition) with its consecutive commits of it. Then each claim, in the order
    they were made, moves to the commit it prefers (``_preference``) among those left unpaired: a
    reset stamped just before the request (inside the skew) gives way to the job's own commit made
    after it. What stays unpaired is foreign.
    """
    listed = list(candidates)
    by_commit: dict[int, list[Candidate]] = {}
    by_claim: dict[int, list[Candidate]] = {}
    for c in listed:
        by_commit.setdefault(c.commit_row, []).append(c)
        by_claim.setdefault(c.claim_row, []).append(c)
    pair_of_claim: dict[int, Candidate] = {}
    commits = sorted(by_commit.values(), key=lambda cs: (cs[0].commit_time, _log_order(cs[0])))
    for options in commits:
        free = [c for c in options if c.claim_row not in pair_of_claim]
        if free:
            best = min(free, key=lambda c: (not c.exact, c.span_end, c.claimed_at, c.claim_row))
            pair_of_claim[best.claim_row] = best
    paired_commits = {c.commit_row for c in pair_of_claim.values()}
    for claim_row in sorted(pair_of_claim, key=lambda row: (pair_of_claim[row].claimed_at, row)):
        current = pair_of_claim[claim_row]
        options = [c for c in by_claim[claim_row] if c.commit_row not in paired_commits]
        better = min(options, key=_preference, default=None)
        if better is not None and _preference(better) < _preference(current):
            paired_commits.discard(current.commit_row)
            paired_commits.add(better.commit_row)
            pair_of_claim[claim_row] = better
    return sorted((row, c.commit_row) for row, c in pair_of_claim.items())
