"""Completeness per event-time window, the pure part: which windows, their offsets, their counts and
whether they are final (the `completeness` table, CONTRACTS.md section 4; README "Completeness").

No I/O here: `app.reconcile.completeness.table` reads the ledger, the sink and the broker and hands the
answers in. Offsets ranges are half-open, [start, end), as everywhere in the audit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from app.config import CompletenessConfig
from app.errors import ConfigError

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
# The lateness of a job when completeness.lateness_seconds is 0: twice its trigger plus this.
LATENESS_MARGIN_S: Final = 300.0

Range = tuple[int, int]


@dataclass(frozen=True)
class Window:
    """An event-time window [start, end), aligned to the epoch."""

    start: datetime
    end: datetime


def window_of(t: datetime, minutes: int) -> Window:
    """The window holding ``t``: windows are ``minutes`` wide and aligned to the epoch, so every run,
    whatever its clock, cuts time into the same windows."""
    width = timedelta(minutes=minutes)
    start = EPOCH + ((t - EPOCH) // width) * width
    return Window(start, start + width)


def windows_from(first: datetime, last: datetime, minutes: int) -> list[Window]:
    """The windows from the one holding ``first`` to the one holding ``last``, both included."""
    width = timedelta(minutes=minutes)
    out: list[Window] = []
    w = window_of(first, minutes)
    while w.start <= last:
        out.append(w)
        w = Window(w.end, w.end + width)
    return out


_TRIGGER: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(millisecond|second|minute|hour)s?\s*$", re.IGNORECASE)
_UNIT_S: Final = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0}


def trigger_seconds(text: str) -> float:
    """A Spark trigger interval ("2 seconds", "1 minute") in seconds."""
    m = _TRIGGER.match(text)
    if m is None:
        raise ConfigError("stream.trigger_interval", f"expected e.g. '2 seconds' or '1 minute', got {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2).lower()]


def lateness(cfg: CompletenessConfig, trigger_interval: str) -> timedelta:
    """How long after its end a window stays provisional: the configured lateness, else the job's
    (twice its trigger interval plus 5 minutes): records of the window may still be in flight."""
    if cfg.lateness_seconds:
        return timedelta(seconds=cfg.lateness_seconds)
    return timedelta(seconds=2 * trigger_seconds(trigger_interval) + LATENESS_MARGIN_S)


def windows_to_compute(
    stored: Mapping[datetime, bool], first_run_from: datetime, last: datetime, minutes: int
) -> list[Window]:
    """The windows a run computes for one job and partition: from the earliest stored window that is
    not final (else the first after the last final one; a partition with no row starts at
    ``first_run_from``) up to the window holding ``last``, without the windows already final, which
    are never recomputed: re-running yields the same rows, a resumed run misses none."""
    provisional = [start for start, final in stored.items() if not final]
    finals = [start for start, final in stored.items() if final]
    width = timedelta(minutes=minutes)
    if provisional:
        first = min(provisional)
    elif finals:
        first = max(finals) + width
    else:
        first = first_run_from
    return [w for w in windows_from(first, last, minutes) if not stored.get(w.start, False)]


def resolved_offset(found: int, high_watermark: int) -> int:
    """An offsets-for-times answer: -1 means no record at or after the time, i.e. the log end."""
    return high_watermark if found < 0 else found


def bound_at(
    t: datetime, broker_offset: int, log_start: int, sink_starts: Sequence[tuple[datetime, int]]
) -> int:
    """The first offset of the records at or after ``t``. The broker answers, unless it lands on the
    log start while retention has deleted records (log start > 0): then the records below the log
    start are found by the sink's own timestamps. ``sink_starts``: (window start, lowest offset the
    sink holds below the log start with a timestamp in that window), in time order."""
    if broker_offset > log_start or log_start == 0:
        return broker_offset
    later = [offset for start, offset in sink_starts if start >= t]
    return min([*later, log_start])


def overlap(a: Range, b: Range) -> int:
    """How many offsets two ranges share."""
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def clip(ranges: Iterable[Range], bounds: Range) -> list[Range]:
    """The parts of ``ranges`` inside ``bounds``."""
    lo, hi = bounds
    return [(max(s, lo), min(e, hi)) for s, e in ranges if min(e, hi) > max(s, lo)]


def missing_ranges(
    bounds: Range, lowest: int | None, highest: int | None, holes: Iterable[Range]
) -> list[Range]:
    """The offsets of ``bounds`` the sink lacks, from what it holds there: its lowest and highest
    offset (None: nothing) and the holes between consecutive offsets it holds."""
    lo, hi = bounds
    if lowest is None or highest is None:
        return [(lo, hi)] if hi > lo else []
    out = [(lo, lowest)] if lowest > lo else []
    out += sorted(clip(holes, bounds))
    if highest + 1 < hi:
        out.append((highest + 1, hi))
    return out


def checkpoint_intervals(checkpoints: Iterable[tuple[int, datetime]]) -> list[tuple[int, int, datetime]]:
    """[lo, hi, completed_at): the first completed checkpoint (by completion time) whose offset passed
    each offset, from (offset, completed_at) of one partition's completed checkpoints. The time a
    record's checkpoint completed is when the job vouched for it: its end of the latency."""
    out: list[tuple[int, int, datetime]] = []
    reached: int | None = None
    for offset, completed_at in sorted(checkpoints, key=lambda c: (c[1], c[0])):
        if reached is None:
            # Offsets before the first checkpoint seen: it is the first to have passed them.
            out.append((-1, offset, completed_at))
            reached = offset
        elif offset > reached:
            out.append((reached, offset, completed_at))
            reached = offset
    return out


@dataclass(frozen=True)
class Verdicts:
    """What reading the missing offsets of a window back from the source showed (the GAP
    confirmation of `app.kafka.gaps`): data records lost, offsets below the log start unverifiable,
    the rest (markers, aborted, compacted) not expected. ``read`` False: some range was not read
    back (no confirmation this run: the window stays provisional). ``capped``: some range held more
    data records than the confirmation counts (`reconcile.confirm_max_records`): the loss is
    certain, its size not, so the counts stay null, and the window may still become final (reading
    the same cap again would tell nothing new)."""

    lost: int = 0
    unverifiable: int = 0
    excluded: int = 0
    read: bool = True
    capped: bool = False

    @property
    def known(self) -> bool:
        return self.read and not self.capped


def verdict_counts(ranges: Sequence[Range], verdicts: Sequence[Mapping[str, Any] | None]) -> Verdicts:
    """The counts of `app.kafka.gaps.verdict` answers, one per range (None: not confirmed)."""
    lost = unverifiable = excluded = 0
    read, capped = True, False
    for (start, end), v in zip(ranges, verdicts, strict=True):
        if v is None:
            read = False
            continue
        if v.get("data_records_capped"):
            capped = True
            continue
        found = int(v["data_records"])
        gone = int(v["offsets_below_log_start"]) + int(v["offsets_beyond_high_watermark"])
        lost += found
        unverifiable += gone
        excluded += max(0, end - start - found - gone)
    return Verdicts(lost, unverifiable, excluded, read, capped)


@dataclass(frozen=True)
class WindowFacts:
    """What is known of one window of one partition before its counts: its offsets, the last
    completed checkpoint's offset of the partition and whether the window is past its lateness."""

    window: Window
    offsets: Range
    checkpoint: int | None  # the last completed checkpoint's offset (exclusive), None: none yet
    closed: bool  # now > window end + lateness

    @property
    def judged(self) -> Range:
        """The window's offsets below the last completed checkpoint."""
        lo, hi = self.offsets
        return (lo, lo if self.checkpoint is None else max(lo, min(hi, self.checkpoint)))

    @property
    def pending(self) -> Range:
        """The window's offsets beyond the last completed checkpoint: not yet judged."""
        return (self.judged[1], self.offsets[1])

    def is_final(self, read: bool) -> bool:
        """Final: past the lateness, every offset below the last completed checkpoint, and every
        missing offset read back from the source. A final window is never recomputed."""
        return self.closed and self.judged[1] >= self.offsets[1] and read


def is_closed(window: Window, late: timedelta, now: datetime) -> bool:
    return now > window.end + late


def ratio(landed: int | None, expected: int | None) -> float | None:
    """landed / expected; None when either is unknown or nothing was expected."""
    if landed is None or expected is None or expected == 0:
        return None
    return landed / expected


@dataclass(frozen=True)
class Counts:
    """The counts of one row of the table; None is unknown, never zero."""

    expected: int | None = None
    landed: int | None = None
    lost: int | None = None
    unverifiable: int | None = None
    duplicated: int | None = None
    pending: int | None = None
    offsets_in_sink_batches: int | None = None
    latency_p50_ms: int | None = None
    latency_p95_ms: int | None = None
    final: bool = False

    @property
    def completeness(self) -> float | None:
        return ratio(self.landed, self.expected)


@dataclass(frozen=True)
class SinkWindow:
    """What a `coordinates` sink holds of one window's offsets: distinct offsets, rows, how many of
    the distinct offsets lie beyond the last completed checkpoint, and the latencies."""

    landed: int = 0
    rows: int = 0
    landed_pending: int = 0
    latency_p50_ms: int | None = None
    latency_p95_ms: int | None = None
    lowest: int | None = None  # the lowest and highest offset it holds there (None: nothing)
    highest: int | None = None
    holes: tuple[Range, ...] = ()  # the ranges between consecutive offsets it holds


def coordinates_counts(facts: WindowFacts, sink: SinkWindow, judged: Verdicts) -> Counts:
    """A `coordinates` window: exact. ``judged``: the verdicts of its missing offsets below the
    last completed checkpoint; missing beyond it are pending."""
    pending_offsets = overlap(facts.pending, facts.offsets)
    pending = max(0, pending_offsets - sink.landed_pending)
    lost = judged.lost if judged.known else None
    unverifiable = judged.unverifiable if judged.known else None
    expected = None if lost is None or unverifiable is None else sink.landed + lost + unverifiable + pending
    return Counts(
        expected=expected,
        landed=sink.landed,
        lost=lost,
        unverifiable=unverifiable,
        duplicated=sink.rows - sink.landed,
        pending=pending,
        latency_p50_ms=sink.latency_p50_ms,
        latency_p95_ms=sink.latency_p95_ms,
        final=facts.is_final(judged.read),
    )


def batches_counts(
    facts: WindowFacts, lost_batches: Sequence[Range], unverifiable_batches: Sequence[Range], judged: Verdicts
) -> Counts:
    """A `delta_batches` window: rows cannot be tied to offsets, so landed, duplicated and the
    latencies are unknown. Known: the data records of its offsets that never reached the sink
    (``lost_batches``: inside batches with no sink commit, or skipped by a restart, read by no
    batch; ``judged``, the verdicts of those offsets), the offsets inside batches whose sink commit
    is beyond the sink's log retention (unverifiable), and the offsets inside completed batches
    that reached the sink."""
    judged_range = facts.judged
    not_in_sink = sum(overlap(r, judged_range) for r in [*lost_batches, *unverifiable_batches])
    gone = sum(overlap(r, judged_range) for r in unverifiable_batches)
    return Counts(
        lost=judged.lost if judged.known else None,
        unverifiable=judged.unverifiable + gone if judged.known else None,
        pending=overlap(facts.pending, facts.offsets),
        offsets_in_sink_batches=max(0, judged_range[1] - judged_range[0] - not_in_sink),
        final=facts.is_final(judged.read),
    )


def offsets_counts(facts: WindowFacts, judged: Verdicts) -> Counts:
    """A `none` window: the sink is not read. Known: the offsets not yet judged, and the data
    records no run of the job read (a restart that skipped them; ``judged``, the verdicts of
    those offsets): lost whatever the sink holds."""
    return Counts(
        lost=judged.lost if judged.known else None,
        unverifiable=judged.unverifiable if judged.known else None,
        pending=overlap(facts.pending, facts.offsets),
        final=facts.is_final(judged.read),
    )
