"""An incident as the ``incidents`` table holds it (``StoredIncident``), its impact in records, and
its summary for machines (``IncidentSummary``: what `reconcile --json`, `incidents --json` and the
nightly's summary carry, and what the nightly's alerts count).

``StoredIncident.to_row`` and ``from_row`` are the one conversion to and from a table row; the
remedy column's JSON is ``remedy.RemedyPlan``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from app.contracts.json_values import JsonObject, JsonValue
from app.contracts.vocabulary import INCIDENT_OPEN, SEVERITIES
from app.incidents.remedy import OffsetRange, RemedyPlan

# The impact columns of the incidents contract, in its order (also the keys of a summary's impact).
IMPACT_COLUMNS: Final = (
    "records_lost",
    "records_unverifiable",
    "records_duplicated",
    "records_replayed",
    "max_commit_lag",
)


@dataclass(frozen=True)
class Impact:
    """Records lost (confirmed), unverifiable (retention deleted them, or confirmation was not run),
    duplicated (extra copies), replayed, and the worst commit lag in offsets (None: no lag seen)."""

    records_lost: int = 0
    records_unverifiable: int = 0
    records_duplicated: int = 0
    records_replayed: int = 0
    max_commit_lag: int | None = None

    @property
    def harm(self) -> int:
        """Records lost, unverifiable or duplicated: what a repair has to make good."""
        return self.records_lost + self.records_unverifiable + self.records_duplicated

    def to_json(self) -> JsonObject:
        return {
            "records_lost": self.records_lost,
            "records_unverifiable": self.records_unverifiable,
            "records_duplicated": self.records_duplicated,
            "records_replayed": self.records_replayed,
            "max_commit_lag": self.max_commit_lag,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Impact:
        """The impact of a row or a summary; a count absent or null is none."""
        lag = value.get("max_commit_lag")
        return cls(
            records_lost=int(value.get("records_lost") or 0),
            records_unverifiable=int(value.get("records_unverifiable") or 0),
            records_duplicated=int(value.get("records_duplicated") or 0),
            records_replayed=int(value.get("records_replayed") or 0),
            max_commit_lag=None if lag is None else int(lag),
        )


@dataclass(frozen=True)
class StoredIncident:
    """One incident of the incidents contract (app.contracts.tables.INCIDENTS_SCHEMA): its columns,
    the impact columns as one ``Impact`` and the remedy column as a ``RemedyPlan``."""

    incident_id: str
    kind: str
    severity: str
    status: str
    job_name: str | None
    group_id: str | None
    run_ids: tuple[str, ...]
    first_evidence_at: datetime | None
    last_evidence_at: datetime | None
    partitions: int
    impact: Impact
    cause: str
    remedy: RemedyPlan
    finding_ids: tuple[str, ...]
    reconcile_run_id: str

    @property
    def is_open(self) -> bool:
        return self.status == INCIDENT_OPEN

    def to_row(self) -> dict[str, Any]:
        """The row of the incidents contract, its columns in the contract's order (this module
        stays free of Spark's types, so the contract itself is not imported here)."""
        row: dict[str, Any] = {
            "incident_id": self.incident_id,
            "kind": self.kind,
            "severity": self.severity,
            "status": self.status,
            "job_name": self.job_name,
            "group_id": self.group_id,
            "run_ids": list(self.run_ids),
            "first_evidence_at": self.first_evidence_at,
            "last_evidence_at": self.last_evidence_at,
            "partitions": self.partitions,
            **self.impact.to_json(),
            "cause": self.cause,
            "remedy": self.remedy.to_json(),
            "finding_ids": list(self.finding_ids),
            "reconcile_run_id": self.reconcile_run_id,
        }
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredIncident:
        """A row of the incidents table as a reader gives it (times as the reader gives them)."""
        return cls(
            incident_id=str(row["incident_id"]),
            kind=str(row["kind"]),
            severity=str(row["severity"]),
            status=str(row["status"]),
            job_name=row["job_name"],
            group_id=row["group_id"],
            run_ids=tuple(row["run_ids"] or ()),
            first_evidence_at=row["first_evidence_at"],
            last_evidence_at=row["last_evidence_at"],
            partitions=int(row["partitions"] or 0),
            impact=Impact.from_json(row),
            cause=str(row["cause"] or ""),
            remedy=RemedyPlan.from_json(row["remedy"]),
            finding_ids=tuple(row["finding_ids"] or ()),
            reconcile_run_id=str(row["reconcile_run_id"]),
        )


def incident_order(incident: StoredIncident) -> tuple[int, int, str]:
    """Most severe first, then the most records lost or duplicated."""
    harm = incident.impact.records_lost + incident.impact.records_duplicated
    return SEVERITIES.index(incident.severity), -harm, incident.incident_id


@dataclass(frozen=True)
class IncidentSummary:
    """What a scheduler needs to page someone: id, kind, severity, partitions and ranges, impact,
    cause and the repair command (None when there is nothing to repair)."""

    incident_id: str
    kind: str
    severity: str
    status: str
    job_name: str | None
    group_id: str | None
    run_ids: tuple[str, ...]
    partitions: int
    ranges: tuple[OffsetRange, ...]
    impact: Impact
    cause: str
    repair: str | None
    finding_ids: tuple[str, ...]

    @classmethod
    def of(cls, incident: StoredIncident) -> IncidentSummary:
        return cls(
            incident_id=incident.incident_id,
            kind=incident.kind,
            severity=incident.severity,
            status=incident.status,
            job_name=incident.job_name,
            group_id=incident.group_id,
            run_ids=incident.run_ids,
            partitions=incident.partitions,
            ranges=tuple(incident.remedy.ranges),
            impact=incident.impact,
            cause=incident.cause,
            repair=incident.remedy.repair_command,
            finding_ids=incident.finding_ids,
        )

    @property
    def is_open(self) -> bool:
        return self.status == INCIDENT_OPEN

    def to_json(self) -> JsonObject:
        return {
            "incident_id": self.incident_id,
            "kind": self.kind,
            "severity": self.severity,
            "status": self.status,
            "job_name": self.job_name,
            "group_id": self.group_id,
            "run_ids": list(self.run_ids),
            "partitions": self.partitions,
            "ranges": [r.to_json() for r in self.ranges],
            "impact": self.impact.to_json(),
            "cause": self.cause,
            "repair": self.repair,
            "finding_ids": list(self.finding_ids),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> IncidentSummary:
        """A summary read back (a nightly's state file, a webhook's payload)."""
        return cls(
            incident_id=str(value["incident_id"]),
            kind=str(value["kind"]),
            severity=str(value["severity"]),
            status=str(value["status"]),
            job_name=value["job_name"],
            group_id=value["group_id"],
            run_ids=tuple(value["run_ids"]),
            partitions=int(value["partitions"]),
            ranges=tuple(OffsetRange.from_json(r) for r in value["ranges"]),
            impact=Impact.from_json(value["impact"]),
            cause=str(value["cause"]),
            repair=value["repair"],
            finding_ids=tuple(value["finding_ids"]),
        )


def summaries_json(incidents: Iterable[StoredIncident]) -> list[JsonValue]:
    """The incidents as `--json` lists them."""
    return [IncidentSummary.of(i).to_json() for i in incidents]
