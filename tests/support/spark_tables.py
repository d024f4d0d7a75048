"""Spark frames of the rows tests/support/ledger_data.py builds, for the tests that need Spark or Delta."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from app.contracts.offsets import LedgerEvent
from app.contracts.tables import GROUP_COMMITS_SCHEMA, LEDGER_SCHEMA, SINK_SCHEMA
from tests.support.ledger_data import GROUP, JOB, T0, TOPIC, at, checkpoint, ev, gc, sink_rows

__all__ = [
    "GROUP",
    "JOB",
    "T0",
    "TOPIC",
    "at",
    "checkpoint",
    "commits_df",
    "ev",
    "gc",
    "ledger_df",
    "rows_of",
    "sink_df",
    "sink_rows",
]


def ledger_df(spark: SparkSession, *groups: Iterable[LedgerEvent]) -> DataFrame:
    rows = [e.to_row() for g in groups for e in g]
    return spark.createDataFrame(rows, LEDGER_SCHEMA)


def commits_df(spark: SparkSession, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), GROUP_COMMITS_SCHEMA)


def sink_df(spark: SparkSession, *row_groups: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame([r for g in row_groups for r in g], SINK_SCHEMA)


def rows_of(df: DataFrame, *cols: str) -> set[tuple[Any, ...]]:
    return {tuple(r[c] for c in cols) for r in df.collect()}
