"""Incidents: a reconciliation's findings grouped by the event that caused them (CONTRACTS.md
sections 4 and 5), with the impact in records, one sentence of cause and a remedy plan.

One event yields many findings: a restart from ``latest`` on a 1,000-partition job is a RESTART_SKIP
and a GAP per partition. People act on the event, so it is grouped here, in pure Python over the
finalized findings of one run. The rules, in order; a finding joins the first incident that claims
it and no other:

1. ``restart`` -- per restarted run: its RESTART_* findings, the vocab.INCIDENT_UNCLEAN_STOP of the run before
   it, the GAPs inside the ranges it skipped and the DUPLICATEs inside the ranges it replayed.
   A restart that resumed exactly after a crash is an ``unclean_stop`` (info: nothing lost).
2. ``unclean_stop`` -- a run that died and was not followed.
3. ``commit_outage`` -- per run: its COMMIT_FAILUREs and the SKIPPED_COMMITs whose commit failed.
4. ``external_offset_change`` -- per group, its offsets changed against the checkpoints, clustered
   in time: commits no claim of the job explains (FOREIGN_COMMIT) and what they did
   (COMMIT_REGRESSION, COMMITTED_AHEAD), and the job's own commits of a wrong offset
   (COMMIT_MISMATCH, told apart in the cause).
5. ``second_writer`` -- per job, DUPLICATEs no restart explains.
6. ``gap`` -- per job, records missing from the sink that no restart explains.
7. ``ledger_gap`` -- per job, sink rows past the last completed checkpoint and ledger
   inconsistencies: output the ledger does not account for.
8. ``skipped_commit`` -- per run, skipped commits nothing covered.

Information nobody has to act on (benign gaps, skipped commits a later commit covered, commits in
flight at a crash, commits of checkpoints a Flink sidecar missed) forms no incident. Incident ids
hash the kind and the event's identity, never the run of the reconciliation, so a re-run over the
same inputs yields the same incidents.

The findings come in as ``StoredFinding``s (``findings.finalize_findings``); the incidents go out
as ``StoredIncident``s with their ``RemedyPlan`` (app.incidents.incident, app.incidents.remedy).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from app.contracts import vocabulary as vocab
from app.contracts.findings import StoredFinding, skipped_records
from app.contracts.instants import instant
from app.contracts.json_values import JsonValue
from app.incidents.incident import Impact, StoredIncident, incident_order
from app.incidents.remedy import (
    NOTHING_TO_REPAIR,
    DeleteDuplicatesStep,
    OffsetRange,
    PartitionOffset,
    RemedyPlan,
    RemedyStep,
    ReplayStep,
    ResetOffsetsStep,
)

# External offset changes further apart than this are separate incidents.
EXTERNAL_CHANGE_CLUSTER: Final = timedelta(minutes=10)
_COMMIT_FINDINGS: Final = (
    vocab.FOREIGN_COMMIT,
    vocab.COMMIT_REGRESSION,
    vocab.COMMITTED_AHEAD,
    vocab.COMMIT_MISMATCH,
)
_ACTIONABLE: Final = (vocab.CRITICAL, vocab.ERROR, vocab.WARN)
# A batch written twice to a sink whose rows carry no offsets: which rows are extra copies only the
# writer's key can tell, so the plan is a check, not a deletion.
REPROCESSED_NOTE: Final = (
    "no automatic repair: the sink's rows carry no offsets; compare the named Delta versions "
    "(time travel) and make the writer idempotent (txn ids it does not reuse, or a MERGE by key)"
)

TopicPartition = tuple[str, int]


@dataclass
class IncidentDraft:
    """An incident while its findings are gathered: what ``to_incidents`` stores once complete."""

    kind: str
    job_name: str | None
    group_id: str | None
    key: str  # the event's identity within its kind and job
    findings: list[StoredFinding] = field(default_factory=list)
    run_ids: set[str] = field(default_factory=set)

    @property
    def incident_id(self) -> str:
        parts = [self.kind, self.job_name or "", self.group_id or "", self.key]
        return hashlib.sha256("\u241f".join(parts).encode("utf-8")).hexdigest()[:32]


def _time(value: JsonValue) -> datetime | None:
    """An evidence value that is an ISO time (evidence stores times as text), else None."""
    if isinstance(value, str) and value:
        try:
            return instant(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def _overlaps(f: StoredFinding, ranges: Mapping[TopicPartition, list[tuple[int, int]]]) -> bool:
    start, end = f.offset_start, f.offset_end
    if start is None or end is None or f.topic is None or f.partition is None:
        return False
    return any(start < hi and lo < end for lo, hi in ranges.get((f.topic, f.partition), []))


# --- grouping ---------------------------------------------------------------------------------------


def group_findings(findings: Sequence[StoredFinding]) -> list[IncidentDraft]:
    """The incidents of one reconciliation's findings."""
    claimed: set[str] = set()
    out: list[IncidentDraft] = []

    def claim(incident: IncidentDraft, members: Iterable[StoredFinding]) -> None:
        for f in members:
            if f.finding_id not in claimed:
                claimed.add(f.finding_id)
                incident.findings.append(f)
                if f.run_id:
                    incident.run_ids.add(f.run_id)
                # A DUPLICATE names no run of its own: its writers that are runs of the job.
                incident.run_ids.update(f.evidence_texts("job_runs"))

    def free(*types: str) -> list[StoredFinding]:
        return [f for f in findings if f.finding_type in types and f.finding_id not in claimed]

    out += _restarts(findings, claim, free)
    for f in free(vocab.UNCLEAN_STOP):
        incident = IncidentDraft(vocab.INCIDENT_UNCLEAN_STOP, f.job_name, f.group_id, str(f.run_id))
        claim(incident, [f])
        out.append(incident)
    by_run: dict[tuple[str | None, str | None], list[StoredFinding]] = defaultdict(list)
    for f in free(vocab.COMMIT_FAILURE, vocab.SKIPPED_COMMIT):
        failed = f.finding_type == vocab.COMMIT_FAILURE or f.evidence.get("reason") == vocab.SKIPPED_FAILED
        if failed and f.severity in _ACTIONABLE:
            by_run[(f.job_name, f.run_id)].append(f)
    for (job, run), members in sorted(by_run.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        incident = IncidentDraft(vocab.INCIDENT_COMMIT_OUTAGE, job, members[0].group_id, str(run))
        claim(incident, members)
        out.append(incident)
    out += _external_changes(free(*_COMMIT_FINDINGS), claim)
    for kind, types in (
        (vocab.INCIDENT_LOST_BATCH, (vocab.BATCH_NOT_IN_SINK,)),
        (vocab.INCIDENT_BATCH_REPROCESSED, (vocab.BATCH_WRITTEN_TWICE,)),
        (vocab.INCIDENT_SECOND_WRITER, (vocab.DUPLICATE,)),
        (vocab.INCIDENT_GAP, (vocab.GAP,)),
        (
            vocab.INCIDENT_LEDGER_GAP,
            (vocab.SINK_BEYOND_CHECKPOINT, vocab.LEDGER_INCONSISTENT, vocab.SINK_COMMIT_UNEXPLAINED),
        ),
    ):
        per_job: dict[str, list[StoredFinding]] = defaultdict(list)
        for f in free(*types):
            if f.severity in _ACTIONABLE:
                per_job[str(f.job_name)].append(f)
        for job, members in sorted(per_job.items()):
            incident = IncidentDraft(kind, job, members[0].group_id, "")
            claim(incident, members)
            out.append(incident)
    per_run: dict[tuple[str, str], list[StoredFinding]] = defaultdict(list)
    for f in free(vocab.SKIPPED_COMMIT):
        if f.severity in _ACTIONABLE:
            per_run[(str(f.job_name), str(f.run_id))].append(f)
    for (job, run), members in sorted(per_run.items()):
        incident = IncidentDraft(vocab.INCIDENT_SKIPPED_COMMIT, job, members[0].group_id, run)
        claim(incident, members)
        out.append(incident)
    return out


Claim = Callable[[IncidentDraft, Iterable[StoredFinding]], None]
Free = Callable[..., list[StoredFinding]]


def _restarts(findings: Sequence[StoredFinding], claim: Claim, free: Free) -> list[IncidentDraft]:
    """Rule 1: one incident per restarted run (the RESTART_* findings name the new run; the
    UNCLEAN_STOP of the run before names it as ``next_run_id``)."""
    restarts: dict[tuple[str, str], list[StoredFinding]] = defaultdict(list)
    for f in free(vocab.RESTART_REPLAY, vocab.RESTART_SKIP):
        restarts[(str(f.job_name), str(f.run_id))].append(f)
    crashes: dict[tuple[str, str], StoredFinding] = {}
    for f in free(vocab.UNCLEAN_STOP):
        following = f.evidence_text("next_run_id")
        if following:
            crashes[(str(f.job_name), following)] = f
    out = []
    for job, run in sorted(set(restarts) | set(crashes)):
        members = restarts.get((job, run), [])
        skipped: dict[TopicPartition, list[tuple[int, int]]] = defaultdict(list)
        replayed: dict[TopicPartition, list[tuple[int, int]]] = defaultdict(list)
        for f in members:
            if f.topic is None or f.partition is None or f.offset_start is None or f.offset_end is None:
                continue  # a restart finding always names its partition and range
            target = skipped if f.finding_type == vocab.RESTART_SKIP else replayed
            target[(f.topic, f.partition)].append((f.offset_start, f.offset_end))
        same_job = [f for f in findings if f.job_name == job]
        lost = [f for f in same_job if f.finding_type == vocab.GAP and _overlaps(f, skipped)]
        twice = [f for f in same_job if f.finding_type == vocab.DUPLICATE and _overlaps(f, replayed)]
        crash = crashes.get((job, run))
        kind = vocab.INCIDENT_RESTART if members else vocab.INCIDENT_UNCLEAN_STOP
        anchor = members[0] if members else crash
        incident = IncidentDraft(kind, job, anchor.group_id if anchor else None, run)
        claim(incident, [*([crash] if crash else []), *members, *lost, *twice])
        incident.run_ids.add(run)
        out.append(incident)
    return out


def _external_changes(members: Sequence[StoredFinding], claim: Claim) -> list[IncidentDraft]:
    """Rule 4: per group, commits no request explains, split where they lie far apart in time."""
    by_group: dict[str, list[tuple[datetime | None, StoredFinding]]] = defaultdict(list)
    for f in members:
        by_group[str(f.group_id)].append((_time(f.evidence.get("commit_time")), f))
    out = []
    for group, timed in sorted(by_group.items()):
        timed.sort(key=lambda tf: (tf[0] is None, tf[0] or datetime.min, tf[1].finding_id))
        clusters: list[list[tuple[datetime | None, StoredFinding]]] = []
        for t, f in timed:
            last = clusters[-1][-1][0] if clusters else None
            if clusters and (t is None or last is None or t - last <= EXTERNAL_CHANGE_CLUSTER):
                clusters[-1].append((t, f))
            else:
                clusters.append([(t, f)])
        for cluster in clusters:
            first = cluster[0][0]
            jobs = sorted({f.job_name for _, f in cluster if f.job_name})
            incident = IncidentDraft(
                vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE,
                jobs[0] if jobs else None,
                group,
                first.isoformat() if first else "",
            )
            claim(incident, [f for _, f in cluster])
            out.append(incident)
    return out


# --- impact, cause, remedy --------------------------------------------------------------------------


def _count(incident: IncidentDraft, finding_type: str, *statuses: str) -> int:
    return sum(
        f.record_count or 0
        for f in incident.findings
        if f.finding_type == finding_type and (not statuses or f.status in statuses)
    )


def impact(incident: IncidentDraft) -> Impact:
    """Records lost (confirmed), unverifiable (retention deleted them, or confirmation was not
    run), duplicated (extra copies), replayed, and the worst commit lag in offsets."""
    lags = [
        f.record_count
        for f in incident.findings
        if f.record_count is not None
        and (
            f.finding_type in _COMMIT_FINDINGS
            or (f.finding_type == vocab.SKIPPED_COMMIT and f.severity in _ACTIONABLE)
        )
        and f.finding_type != vocab.FOREIGN_COMMIT
    ]
    # A batch's findings count offsets (rows cannot be tied to offsets in a delta_batches sink):
    # a lost batch's offsets are lost records, a batch written twice re-processed its offsets.
    # A skip read back from the source (a sink that cannot show missing records) counts the data
    # records it never read; a coordinates sink's skip is counted by the GAPs inside it.
    skipped = [
        counts
        for f in incident.findings
        if f.finding_type == vocab.RESTART_SKIP and (counts := skipped_records(f)) is not None
    ]
    return Impact(
        records_lost=_count(incident, vocab.GAP, vocab.CONFIRMED)
        + _count(incident, vocab.BATCH_NOT_IN_SINK, vocab.CONFIRMED)
        + sum(lost for lost, _ in skipped),
        records_unverifiable=_count(incident, vocab.GAP, vocab.UNVERIFIABLE, vocab.OPEN)
        + _count(incident, vocab.BATCH_NOT_IN_SINK, vocab.UNVERIFIABLE)
        + sum(gone for _, gone in skipped),
        records_duplicated=_count(incident, vocab.DUPLICATE),
        records_replayed=_count(incident, vocab.RESTART_REPLAY) + _count(incident, vocab.BATCH_WRITTEN_TWICE),
        max_commit_lag=max(lags, default=None),
    )


def severity(incident: IncidentDraft, effect: Impact) -> str:
    """Critical for confirmed loss, error for duplicates, unverifiable loss or commits nobody
    explains, warn for risk without loss, info when nothing was lost."""
    types = {f.finding_type for f in incident.findings}
    if effect.records_lost:
        return vocab.CRITICAL
    if (
        effect.records_duplicated
        or effect.records_unverifiable
        or types
        & {vocab.FOREIGN_COMMIT, vocab.COMMIT_REGRESSION, vocab.COMMIT_MISMATCH, vocab.BATCH_WRITTEN_TWICE}
    ):
        return vocab.ERROR
    if any(f.severity in _ACTIONABLE for f in incident.findings):
        return vocab.WARN
    return vocab.INFO


def partitions_of(incident: IncidentDraft) -> list[TopicPartition]:
    return sorted(
        {(f.topic, f.partition) for f in incident.findings if f.topic is not None and f.partition is not None}
    )


def _records(incident: IncidentDraft, finding_type: str) -> int:
    return sum(f.record_count or 0 for f in incident.findings if f.finding_type == finding_type)


def cause(incident: IncidentDraft, effect: Impact) -> str:
    """One sentence, built from the evidence."""
    where = f"{len(partitions_of(incident))} partition(s)"
    job = incident.job_name or "an unknown job"
    found = {f.finding_type: f for f in incident.findings}
    kinds = ", ".join(sorted(found))
    crash = found.get(vocab.UNCLEAN_STOP)
    dead = crash.run_id if crash else "?"
    if incident.kind == vocab.INCIDENT_UNCLEAN_STOP:
        following = crash.evidence_text("next_run_id") if crash else None
        if following:
            return (
                f"Run {dead} of {job} was killed; run {following} resumed exactly from its "
                "checkpoint, so nothing was lost or read twice."
            )
        return f"Run {dead} of {job} went silent without stopping cleanly, and no later run resumed it."
    if incident.kind == vocab.INCIDENT_RESTART:
        first = found.get(vocab.RESTART_SKIP) or found[vocab.RESTART_REPLAY]
        source = first.evidence_text("resume_source")
        before = f"after run {dead} died" if crash else "after a clean stop"
        what = (
            f"skipped {_records(incident, vocab.RESTART_SKIP)} offsets"
            if vocab.RESTART_SKIP in found
            else f"re-read {effect.records_replayed} offsets"
        )
        return (
            f"Run {first.run_id} of {job} restarted from '{source}' {before} and {what} on {where}: "
            f"{effect.records_lost} records lost, {effect.records_duplicated} duplicated."
        )
    if incident.kind == vocab.INCIDENT_COMMIT_OUTAGE:
        errors = sorted({e for f in incident.findings if (e := f.evidence_text("error"))})
        return (
            f"Offset commits of {job} failed ({', '.join(errors) or 'unknown error'}) on {where}; "
            "the group's offsets lagged the checkpoints meanwhile."
        )
    if incident.kind == vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE and set(found) == {vocab.COMMIT_MISMATCH}:
        # The job's own commits (it requested or was acknowledged those offsets), not an outsider's.
        return (
            f"{job} committed offsets to group {incident.group_id} that differ from its checkpoints' "
            f"on {where} ({vocab.COMMIT_MISMATCH}): an offset-dialect error in its committer."
        )
    if incident.kind == vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE:
        return (
            f"The offsets of group {incident.group_id} were changed outside {job} on {where} ({kinds}): "
            "a reset tool or another consumer on the same group id."
        )
    if incident.kind == vocab.INCIDENT_SECOND_WRITER:
        return (
            f"{effect.records_duplicated} extra copies in the sink of {job} on {where} that no "
            f"restart explains, written by {_writers(incident, job)}."
        )
    if incident.kind == vocab.INCIDENT_GAP:
        return (
            f"{effect.records_lost} records confirmed missing and {effect.records_unverifiable} "
            f"unverifiable in the sink of {job} on {where}, below its completed checkpoints."
        )
    if incident.kind == vocab.INCIDENT_LOST_BATCH:
        return (
            f"Completed batch(es) {_batches(incident)} of {job} have no commit left in its Delta sink "
            f"({_versions(incident)}): {effect.records_lost} offsets lost and "
            f"{effect.records_unverifiable} unverifiable on {where}."
        )
    if incident.kind == vocab.INCIDENT_BATCH_REPROCESSED:
        return (
            f"Batch(es) {_batches(incident)} of {job} were committed to its Delta sink more than once "
            f"({_versions(incident)}): {effect.records_replayed} offsets re-processed on {where}; "
            "whether rows doubled depends on the writer."
        )
    if incident.kind == vocab.INCIDENT_LEDGER_GAP:
        return f"The sink of {job} holds output its ledger does not account for on {where} ({kinds})."
    return (
        f"Commits of {len(incident.findings)} completed checkpoint(s) of {job} never reached the group "
        f"and nothing later covered them, on {where}."
    )


def _batches(incident: IncidentDraft) -> str:
    batches = sorted({f.checkpoint_id for f in incident.findings if f.checkpoint_id is not None})
    return ", ".join(map(str, batches))


def _versions(incident: IncidentDraft) -> str:
    """The sink versions the batch findings name, or that none is left."""
    versions = sorted(
        {v for f in incident.findings for v in _ints(f.evidence.get(vocab.DETAIL_SINK_VERSIONS))}
    )
    return f"Delta version(s) {', '.join(map(str, versions))}" if versions else "no Delta version holds them"


def _ints(value: JsonValue) -> list[int]:
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _writers(incident: IncidentDraft, job: str) -> str:
    """Who wrote the copies: the job's runs, then the writers that are no run of it (as the
    DUPLICATE evidence tells them apart), else every writer the evidence names."""
    outside = sorted({w for f in incident.findings for w in f.evidence_texts("outside_writers")})
    named = [f"run {r}" for r in sorted(incident.run_ids)] + [
        f"{w or 'a writer with no run id'} (no run of {job})" for w in outside
    ]
    if not named:  # findings stored before the evidence told the writers apart
        named = sorted({str(w.get("run")) for f in incident.findings for w in _writer_objects(f)})
    return " and ".join(named) or "unknown writers"


def _writer_objects(f: StoredFinding) -> list[dict[str, JsonValue]]:
    """The writers a DUPLICATE's evidence names (each an object with its run and checkpoint)."""
    writers = f.evidence.get("writers")
    return [w for w in writers if isinstance(w, dict)] if isinstance(writers, list) else []


def _ranges(findings: Iterable[StoredFinding]) -> tuple[OffsetRange, ...]:
    """The offset ranges of ``findings``, by partition and start."""
    ranges = sorted(
        (f.topic, f.partition, f.offset_start, f.offset_end)
        for f in findings
        if f.topic is not None
        and f.partition is not None
        and f.offset_start is not None
        and f.offset_end is not None
    )
    return tuple(OffsetRange(*r) for r in ranges)


def remedy(incident: IncidentDraft, completed: Mapping[tuple[str, str, int], int]) -> RemedyPlan:
    """The plan (never executed here). ``completed``: (job, topic, partition) -> the offset of the
    latest completed checkpoint, what group offsets must say for a restart from them to be exact."""
    steps: list[RemedyStep] = []
    found = incident.findings
    lost = (vocab.GAP, vocab.BATCH_NOT_IN_SINK)
    gaps = _ranges(f for f in found if f.finding_type in lost and f.status != vocab.BENIGN)
    if gaps:
        steps.append(ReplayStep(gaps))
    dups = _ranges(f for f in found if f.finding_type == vocab.DUPLICATE)
    if dups:
        steps.append(DeleteDuplicatesStep(dups))
    if incident.kind in (
        vocab.INCIDENT_EXTERNAL_OFFSET_CHANGE,
        vocab.INCIDENT_COMMIT_OUTAGE,
        vocab.INCIDENT_SKIPPED_COMMIT,
    ):
        job = str(incident.job_name)
        offsets = tuple(
            PartitionOffset(t, p, completed[(job, t, p)])
            for t, p in partitions_of(incident)
            if (job, t, p) in completed
        )
        if offsets:
            steps.append(ResetOffsetsStep(incident.group_id, offsets))
    if not steps and incident.kind == vocab.INCIDENT_BATCH_REPROCESSED:
        return RemedyPlan(note=REPROCESSED_NOTE)
    if not steps:
        return RemedyPlan(note=NOTHING_TO_REPAIR)
    return RemedyPlan(tuple(steps))


def repair_command(incident_id: str) -> str:
    return f"offset-audit repair --incident {incident_id}"


def to_incidents(
    incidents: Sequence[IncidentDraft],
    reconcile_run_id: str,
    completed: Mapping[tuple[str, str, int], int],
) -> list[StoredIncident]:
    """The incidents as this run stores them, most severe first (``incident_order``)."""
    out = []
    for incident in incidents:
        effect = impact(incident)
        times = [
            t
            for f in incident.findings
            for v in f.evidence.values()
            if (t := _time(v)) is not None and t.tzinfo is not None
        ]
        plan = remedy(incident, completed)
        out.append(
            StoredIncident(
                incident_id=incident.incident_id,
                kind=incident.kind,
                severity=severity(incident, effect),
                status=vocab.INCIDENT_OPEN,
                job_name=incident.job_name,
                group_id=incident.group_id,
                run_ids=tuple(sorted(incident.run_ids)),
                first_evidence_at=min(times, default=None),
                last_evidence_at=max(times, default=None),
                partitions=len(partitions_of(incident)),
                impact=effect,
                cause=cause(incident, effect),
                remedy=dataclasses.replace(plan, command=repair_command(incident.incident_id)),
                finding_ids=tuple(sorted(f.finding_id for f in incident.findings)),
                reconcile_run_id=reconcile_run_id,
            )
        )
    return sorted(out, key=incident_order)


def carry_resolution(
    incidents: Sequence[StoredIncident], resolved: Mapping[str, StoredIncident]
) -> list[StoredIncident]:
    """The incidents to store, given the ``resolved`` ones stored (by id). A resolved incident is
    history: found again with nothing lost, unverifiable or duplicated now (a RESTART_SKIP stays in
    the ledger for good, but the gap it left was replayed), it is carried over as it was written,
    its impact, severity, cause and remedy with the repair's execution record and undo; its findings
    stay claimed by it, so they form no new incident. Found again with harm (the loss came back,
    e.g. the repair was undone), it is open again, as this run sees it."""
    out = []
    for incident in incidents:
        stored = resolved.get(incident.incident_id)
        out.append(incident if stored is None or incident.impact.harm else stored)
    return sorted(out, key=incident_order)


def settled_findings(built: Sequence[StoredIncident], kept: Sequence[StoredIncident]) -> set[str]:
    """The ids of this run's findings that belong to an incident that stays resolved: what a
    repair already made good, which fails no run (``--fail-on``)."""
    resolved = {i.incident_id for i in kept if i.status == vocab.INCIDENT_RESOLVED}
    return {fid for i in built if i.incident_id in resolved for fid in i.finding_ids}
