"""Which incidents `watch` alerts: one when it opens, again only when its impact changes.

What was alerted is kept in the ``alert_state`` table (one row per incident: the fingerprint last
sent), so the decision survives a restart of watch. The webhook is POSTed before the state is
written: a watch killed between the two sends that alert once more (at least once), never zero times.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.incidents.incident import IncidentSummary, StoredIncident
from app.storage.handles import TableHandle


def fingerprint(incident: StoredIncident) -> str:
    """What a person is told about: severity, status and the impact in records. Run ids and the
    reconcile run that last saw the incident change every cycle and are left out on purpose."""
    return json.dumps(
        {"severity": incident.severity, "status": incident.status, "impact": incident.impact.to_json()},
        sort_keys=True,
    )


@dataclass(frozen=True)
class DueAlerts:
    opened: tuple[StoredIncident, ...] = ()  # never alerted before
    changed: tuple[StoredIncident, ...] = ()  # alerted with another fingerprint

    @property
    def empty(self) -> bool:
        return not (self.opened or self.changed)

    def payload(self, cycle_id: str) -> dict[str, Any]:
        """The webhook's JSON body."""
        return {
            "source": "watch",
            "cycle_id": cycle_id,
            "opened": [IncidentSummary.of(i).to_json() for i in self.opened],
            "changed": [IncidentSummary.of(i).to_json() for i in self.changed],
        }


def due_alerts(incidents: Sequence[StoredIncident], sent: Mapping[str, str]) -> DueAlerts:
    """The open incidents to alert, given ``sent`` (incident id -> fingerprint last alerted). A
    resolved incident is not alerted; it is alerted again if it reopens with another fingerprint."""
    opened, changed = [], []
    for incident in incidents:
        if not incident.is_open:
            continue
        before = sent.get(incident.incident_id)
        if before is None:
            opened.append(incident)
        elif before != fingerprint(incident):
            changed.append(incident)
    return DueAlerts(tuple(opened), tuple(changed))


def read_sent(alert_state: TableHandle) -> dict[str, str]:
    rows = alert_state.read_columns(["incident_id", "fingerprint"]) or []
    return {str(r["incident_id"]): str(r["fingerprint"]) for r in rows}


def record_sent(alert_state: TableHandle, due: DueAlerts, cycle_id: str, at: datetime) -> None:
    rows = [
        {"incident_id": i.incident_id, "fingerprint": fingerprint(i), "alerted_at": at, "cycle_id": cycle_id}
        for i in (*due.opened, *due.changed)
    ]
    if rows:
        alert_state.merge(rows)
