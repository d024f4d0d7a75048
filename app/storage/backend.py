"""Which library reads and writes a Delta table: the one place that decides it.

Spark does every large read and write. The small audit tables (ledger appends from the driver,
findings, summaries, run records) are read and written on the driver with delta-rs when the table
is on local storage, which saves a Spark job per write; elsewhere they go through Spark, whose
Hadoop connectors carry the cluster's storage settings.
"""

from __future__ import annotations

from urllib.parse import urlparse


def is_local_path(path: str) -> bool:
    """A plain path or a file: URI, which delta-rs can write without Spark's storage settings."""
    return urlparse(path).scheme in ("", "file")
