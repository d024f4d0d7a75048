"""A row of the ``findings`` table (CONTRACTS.md section 5) and its id: ``StoredFinding``, what
everything downstream of the rules takes (incidents, the outputs, the commands, the dashboard).

``finding_id`` hashes the identity columns -- never run ids of the reconciliation or times of
detection, so a re-run over the same inputs yields the same ids. ``to_row`` and ``from_row`` are
the one conversion to and from a table row. The rules' own ``Finding`` (``app.reconcile.findings``)
becomes one through ``StoredFinding.of``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from app.contracts.json_values import JsonObject, JsonValue
from app.contracts.tables import FINDINGS_SCHEMA
from app.errors import SchemaMismatchError

# The findings contract's columns, in its order: what a StoredFinding holds and a row carries.
FINDINGS_COLUMNS: Final = tuple(FINDINGS_SCHEMA.fieldNames())
# What a run adds when it stores a finding: the id, its run id and time of detection.
ADDED_WHEN_STORED: Final = ("finding_id", "reconcile_run_id", "detected_at")
# What makes a finding itself; evidence, counts, severity and status may change between runs.
IDENTITY_COLUMNS: Final = (
    "finding_type",
    "job_name",
    "group_id",
    "topic",
    "partition",
    "checkpoint_id",
    "run_id",
    "offset_start",
    "identity",
)

# The id is sha2-256 over the identity columns as strings, a null spelled out so (null, 'a') and
# ('a', null) differ; the same bytes earlier versions hashed in Spark, so stored ids stay valid.
_NULL: Final = "\u2400"
_SEP: Final = "\u241f"


def finding_id(row: Mapping[str, Any]) -> str:
    parts = [_NULL if row[c] is None else str(row[c]) for c in IDENTITY_COLUMNS]
    return hashlib.sha256(_SEP.join(parts).encode("utf-8")).hexdigest()


def evidence_json(evidence: Mapping[str, Any]) -> str:
    """The evidence column's text: keys sorted, times and other non-JSON values as ``str``."""
    return json.dumps(evidence, sort_keys=True, default=str)


def parse_evidence(text: str | None) -> JsonObject:
    """The evidence column's text parsed back; a finding without evidence has none."""
    value = json.loads(text or "{}")
    if not isinstance(value, dict):
        raise ValueError(f"finding evidence is not a JSON object: {text!r}")
    return value


class FindingCore(Protocol):
    """A finding as a rule produced it (``app.reconcile.findings.Finding``): its ``core_row`` is
    the findings contract minus ``ADDED_WHEN_STORED``, evidence as JSON text, plus ``identity``."""

    def core_row(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class StoredFinding:
    """One finding as the ``findings`` table holds it: every column of the contract, in its order,
    with the evidence parsed (what ``json.loads`` gives back of the stored text, so a finding just
    finalized equals the same finding read back). Built by ``of`` from a rule's finding or by
    ``from_row`` from a stored row; ``to_row`` gives the row back."""

    finding_id: str
    reconcile_run_id: str
    detected_at: datetime
    finding_type: str
    severity: str
    status: str
    job_name: str | None
    group_id: str | None
    topic: str | None
    partition: int | None
    checkpoint_id: int | None
    run_id: str | None
    offset_start: int | None
    offset_end: int | None
    record_count: int | None
    evidence: Mapping[str, JsonValue]

    @classmethod
    def of(cls, finding: FindingCore, reconcile_run_id: str, detected_at: datetime) -> StoredFinding:
        """The finding as this run stores it; its evidence as the table will give it back."""
        core = finding.core_row()
        kept = {c: core[c] for c in FINDINGS_COLUMNS if c not in ADDED_WHEN_STORED and c != "evidence"}
        return cls(
            finding_id=finding_id(core),
            reconcile_run_id=reconcile_run_id,
            detected_at=detected_at,
            evidence=parse_evidence(core["evidence"]),
            **kept,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredFinding:
        """A row of the findings table (as delta-rs or Spark reads it), evidence parsed."""
        fields = {name: row[name] for name in FINDINGS_COLUMNS if name != "evidence"}
        try:
            evidence = parse_evidence(row["evidence"])
        except ValueError as exc:
            raise SchemaMismatchError(f"finding {row['finding_id']}: {exc}") from exc
        return cls(**fields, evidence=evidence)

    def to_row(self) -> dict[str, Any]:
        """The row of the findings contract: every column, evidence as its JSON text."""
        row = {name: getattr(self, name) for name in FINDINGS_COLUMNS}
        row["evidence"] = evidence_json(self.evidence)
        return row

    def evidence_text(self, key: str) -> str | None:
        """An evidence value as text (None when absent or null)."""
        value = self.evidence.get(key)
        return None if value is None else str(value)

    def evidence_texts(self, key: str) -> list[str]:
        """An evidence list's items as text (none when absent or not a list)."""
        value = self.evidence.get(key)
        return [str(v) for v in value] if isinstance(value, list) else []


# A RESTART_SKIP judged from the source (its job's sink cannot show missing records): the evidence
# key with the data records lost and the offsets unverifiable in its range.
SKIPPED_RECORDS_KEY: Final = "skipped_records"


def skipped_records(f: StoredFinding) -> tuple[int, int] | None:
    """(records lost, offsets unverifiable) of a RESTART_SKIP judged from the source; None for one
    a sink's GAPs judge (`coordinates`: what the sink lacks is the loss, and a repair makes it good).
    Not read back (confirmation off): every offset of its range is unverifiable."""
    return skipped_counts(f.evidence, f.record_count)


def skipped_counts(evidence: Mapping[str, JsonValue], record_count: int | None) -> tuple[int, int] | None:
    """``skipped_records`` from a RESTART_SKIP's parsed evidence and its record count (its offsets)."""
    if SKIPPED_RECORDS_KEY not in evidence:
        return None
    counts = evidence[SKIPPED_RECORDS_KEY]
    if not isinstance(counts, dict):
        return 0, record_count or 0
    lost, gone = counts.get("lost"), counts.get("unverifiable")
    return (lost if isinstance(lost, int) else 0), (gone if isinstance(gone, int) else 0)
