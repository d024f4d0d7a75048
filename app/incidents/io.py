"""The incidents table's reads and writes, on the driver through delta-rs: what `reconcile` stores
and carries over, what the `incidents` command lists, what `repair` marks resolved, and the stored
findings an open incident keeps."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

import pyarrow.compute as pc

from app.contracts.findings import StoredFinding
from app.contracts.instants import instant
from app.contracts.tables import INCIDENTS_SCHEMA
from app.contracts.vocabulary import INCIDENT_OPEN, INCIDENT_RESOLVED
from app.incidents.incident import StoredIncident, incident_order
from app.incidents.remedy import RepairOutcome
from app.storage.handles import AuditTables, TableHandle


def merge_incidents(incidents_table: TableHandle, incidents: Sequence[StoredIncident]) -> None:
    """Upsert by incident_id: a re-run over the same findings updates, never adds."""
    incidents_table.merge([i.to_row() for i in incidents])


def resolved_incidents(tables: AuditTables) -> dict[str, StoredIncident]:
    """The resolved incidents as stored, by id: history a later reconciliation carries over."""
    table = tables.incidents.rows(pc.field("status") == INCIDENT_RESOLVED)
    rows = [] if table is None else table.to_pylist()
    incidents = (StoredIncident.from_row({k: instant(v) for k, v in r.items()}) for r in rows)
    return {i.incident_id: i for i in incidents}


def open_incident_findings(tables: AuditTables, jobs: Sequence[str], found: set[str]) -> list[StoredFinding]:
    """The stored findings of ``jobs``' open incidents that this run did not find again.

    They are grouped with this run's findings, so an open incident keeps what earlier windows found:
    its impact is the sum over its life, never only the latest window's (two losses a night apart,
    or a restart one watch cycle sees and the records it lost the next). Only open incidents: a
    resolved one's findings stay behind it."""
    if not jobs:
        return []
    incidents = tables.incidents.rows(
        (pc.field("status") == INCIDENT_OPEN) & pc.field("job_name").isin(list(jobs)),
        columns=["finding_ids", "status", "job_name"],
    )
    wanted = {fid for r in (incidents.to_pylist() if incidents else []) for fid in r["finding_ids"] or ()}
    wanted -= found
    if not wanted:
        return []
    rows = tables.findings.rows(pc.field("finding_id").isin(sorted(wanted)))
    return [StoredFinding.from_row(r) for r in (rows.to_pylist() if rows else [])]


def after_repair(incident: StoredIncident, outcome: RepairOutcome) -> StoredIncident:
    """The incident after a repair: resolved, with what was done inside its remedy. A repeat that
    changed nothing leaves a resolved incident as it was: its remedy keeps the execution that did
    the work, and a rerun has nothing to record."""
    if incident.status == INCIDENT_RESOLVED and not outcome.changed:
        return incident
    remedy = dataclasses.replace(incident.remedy, executed=outcome)
    return dataclasses.replace(incident, status=INCIDENT_RESOLVED, remedy=remedy)


def mark_resolved(incidents_table: TableHandle, incident: StoredIncident, outcome: RepairOutcome) -> bool:
    """Record a repair on its incident (``after_repair``): one commit of the incidents table when the
    incident changes, none when it does not. Returns whether it wrote."""
    updated = after_repair(incident, outcome)
    if updated == incident:
        return False
    merge_incidents(incidents_table, [updated])
    return True


def read_incidents(
    incidents_table: TableHandle, *, jobs: Sequence[str] = (), since: datetime | None = None
) -> list[StoredIncident]:
    """Stored incidents, most severe first; only ``jobs`` (all when empty), only with evidence at or
    after ``since``. Read on the driver through delta-rs: the handle needs no session."""
    rows = incidents_table.read_columns(INCIDENTS_SCHEMA.fieldNames())
    out = []
    for row in rows or []:
        incident = StoredIncident.from_row({k: instant(v) for k, v in row.items()})
        if jobs and incident.job_name not in jobs:
            continue
        last = incident.last_evidence_at
        if since is not None and last is not None and last < since:
            continue
        out.append(incident)
    return sorted(out, key=incident_order)
