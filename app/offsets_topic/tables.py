"""The tables `ingest-offsets` writes: names, schemas, the record kinds each holds, and the id of
their idempotent appends. Shared by both routes (`spark_route`, `driver_route`) and the run's bookkeeping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pyspark.sql.types import StructType

from app.contracts.tables import (
    DECODE_ERRORS_SCHEMA,
    GROUP_COMMITS_SCHEMA,
    GROUP_EVENTS_SCHEMA,
    INGEST_POSITIONS_SCHEMA,
)
from app.offsets_topic.decoded import (
    KIND_COMMIT,
    KIND_ERROR,
    KIND_GROUP_METADATA,
    KIND_GROUP_TOMBSTONE,
    KIND_TOMBSTONE,
)

GROUP_COMMITS = "group_commits"
GROUP_EVENTS = "group_events"
DECODE_ERRORS = "decode_errors"
INGEST_POSITIONS = "ingest_positions"
TABLE_SCHEMAS: Final[Mapping[str, StructType]] = {
    GROUP_COMMITS: GROUP_COMMITS_SCHEMA,
    GROUP_EVENTS: GROUP_EVENTS_SCHEMA,
    DECODE_ERRORS: DECODE_ERRORS_SCHEMA,
    INGEST_POSITIONS: INGEST_POSITIONS_SCHEMA,
}

DATA_TABLES: Final = (GROUP_COMMITS, GROUP_EVENTS, DECODE_ERRORS)  # positions are written apart, last
# The decoded record kinds each data table holds.
TABLE_KINDS: Final[Mapping[str, tuple[str, ...]]] = {
    GROUP_COMMITS: (KIND_COMMIT, KIND_TOMBSTONE),
    GROUP_EVENTS: (KIND_GROUP_METADATA, KIND_GROUP_TOMBSTONE),
    DECODE_ERRORS: (KIND_ERROR,),
}

# Delta's idempotent-append id for every data table of `ingest-offsets`; txnVersion is the run's seq.
INGEST_TXN_APP_ID: Final = "offset-audit.ingest-offsets"
