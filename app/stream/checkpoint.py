"""Spark's checkpoint files of the streaming query, as the job reads them: the offset log, the
commit log, where the Kafka source started, the query's id and when an entry was written.

Read through Hadoop's file system (`storage.files`), so a checkpoint on object storage reads the
same; the parsing of each file's text is `stream.startup`'s (pure functions).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import UTC, date, datetime

from pyspark.sql import SparkSession

from app.contracts.offsets import TopicPartitionKey
from app.errors import CheckpointFormatError
from app.storage.files import list_names, modification_time_ms, read_text
from app.stream.startup import facts_since, parse_initial_offsets, parse_offset_log

log = logging.getLogger(__name__)

OFFSETS = "offsets"
COMMITS = "commits"


def batch_ids(names: Iterable[str]) -> list[int]:
    """The batch ids among a log directory's entry names (Spark's temporary files left out), ascending."""
    return sorted(int(n) for n in names if n.isdigit())


def parse_query_id(metadata: str) -> str:
    """The streaming query's id from the text of the checkpoint's `metadata` file."""
    return str(json.loads(metadata)["id"])


class CheckpointFiles:
    """The checkpoint directory of one streaming query."""

    def __init__(self, spark: SparkSession, directory: str) -> None:
        self.spark = spark
        self.directory = directory

    def log_ids(self, log_name: str) -> list[int]:
        """The batch ids of the ``log_name`` log (OFFSETS or COMMITS), ascending."""
        return batch_ids(list_names(self.spark, f"{self.directory}/{log_name}"))

    def offsets_of(self, batch_id: int) -> dict[TopicPartitionKey, int] | None:
        """The end offsets Spark planned for ``batch_id``, None when the log has no entry for it."""
        text = read_text(self.spark, f"{self.directory}/{OFFSETS}/{batch_id}")
        return None if text is None else parse_offset_log(text)

    def offset_log(self) -> dict[int, dict[TopicPartitionKey, int]]:
        """Every entry of the offset log by batch id."""
        out = {}
        for batch in self.log_ids(OFFSETS):
            offsets = self.offsets_of(batch)
            if offsets is not None:
                out[batch] = offsets
        return out

    def initial_offsets(self) -> dict[TopicPartitionKey, int] | None:
        """Where Spark's Kafka source started in this checkpoint (`sources/0/0`), None if not yet;
        empty when the file cannot be read (the ledger still knows where the previous run started,
        see `startup.plan_checkpoint_resume`)."""
        text = read_text(self.spark, f"{self.directory}/sources/0/0")
        if text is None:
            return None
        try:
            return parse_initial_offsets(text)
        except CheckpointFormatError as exc:
            log.warning("ignoring %s/sources/0/0: %s", self.directory, exc)
            return {}

    def source_initial_offsets(self) -> dict[TopicPartitionKey, int] | None:
        """Where every Kafka source of the query started (`sources/<n>/0` of each source, merged),
        None until Spark wrote the first entry of the offset log. A query may read several Kafka
        sources (a union, a join); a source whose file is not Kafka's offsets (another kind of
        source) is left out.

        Spark writes each source's `sources/<n>/0` while it plans the first batch, one source after
        another, and the offset log's first entry once every source has: before that entry the
        files here may be some of the sources only (an attach that looked in between recorded one
        source's start and not the other's)."""
        if not self.log_ids(OFFSETS):
            return None
        found: dict[TopicPartitionKey, int] | None = None
        for source in sorted(
            int(n) for n in list_names(self.spark, f"{self.directory}/sources") if n.isdigit()
        ):
            text = read_text(self.spark, f"{self.directory}/sources/{source}/0")
            if text is None:
                continue
            try:
                offsets = parse_initial_offsets(text)
            except CheckpointFormatError:
                continue  # not a Kafka source: nothing of ours
            found = {**(found or {}), **offsets}
        return found

    def query_id(self) -> str:
        """The streaming query's id from the checkpoint's metadata ('no-metadata' before Spark wrote it)."""
        meta = read_text(self.spark, f"{self.directory}/metadata")
        return parse_query_id(meta) if meta else "no-metadata"

    def written_at(self, log_name: str, batch_id: int) -> datetime | None:
        """When Spark wrote ``batch_id``'s entry of the ``log_name`` log, None if it has none."""
        ms = modification_time_ms(self.spark, f"{self.directory}/{log_name}/{batch_id}")
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def ledger_since(checkpoint: CheckpointFiles, oldest_batch: int | None) -> date | None:
    """The first ledger day a start reads (`startup.facts_since`) when ``oldest_batch`` is the
    oldest batch of the offset log it recovers from: the reference job's start and an attached
    query's alike. None (every day) without a batch or its file's time."""
    if oldest_batch is None:
        return None
    return facts_since(checkpoint.written_at(OFFSETS, oldest_batch))
