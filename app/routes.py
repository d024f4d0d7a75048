"""Which engine runs a rule: the one module that decides, for every rule the application can run
either in the driver process (Arrow, DuckDB, numpy, delta-rs) or on Spark's executors.

The driver route has no per-query cost (a Spark query pays planning, code generation and task
scheduling, about a second in a fresh JVM, whatever its size), so it wins whenever the rows are few
enough to hold in the driver; Spark wins where the rows are many, or live on a cluster's executors.
Each rule below is written once and run by whichever engine its policy names.
"""

from __future__ import annotations

import re
from typing import Final

from app.errors import OffsetAuditError

DRIVER: Final = "driver"
SPARK: Final = "spark"
ROUTES: Final = (DRIVER, SPARK)

# --- ingest-offsets: where __consumer_offsets is read and decoded ----------------------------------

# Not `local-cluster[...]`: Spark's test master whose executors are separate processes.
_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


def decode_route(setting: str, master: str) -> str:
    """Where `ingest-offsets` reads and decodes (config `ingest.decode_on`: auto, driver or spark).

    'auto' reads on the driver when Spark runs local (`local`, `local[N]`, `local[*]`, `local[N,F]`):
    there the executors are threads of the driver process, so a Kafka consumer and delta-rs in that
    process lose no parallelism and skip Spark's per-record overhead (several times faster, see
    bench.ingest_offsets). On a cluster the work goes to the executors through Spark.
    """
    if setting in ROUTES:
        return setting
    if setting != "auto":
        raise OffsetAuditError(f"ingest.decode_on must be auto, driver or spark, got '{setting}'")
    return DRIVER if _LOCAL_MASTER.fullmatch(master.strip()) else SPARK


# --- check: where a table is validated ------------------------------------------------------------

# A few hundred thousand rows of an audit table fit easily in the driver's memory and validate in
# seconds with GE's pandas source, while Spark pays a job per metric bundle whatever the size.
CHECK_DRIVER_MAX_ROWS: Final = 200_000


def check_route(rows: int, max_rows: int = CHECK_DRIVER_MAX_ROWS) -> str:
    """Where a table is validated: on the driver (delta-rs, DuckDB, GE's pandas source) when it has
    at most ``max_rows`` rows to validate, else with Spark (``max_rows`` 0 forces Spark)."""
    return DRIVER if max_rows > 0 and rows <= max_rows else SPARK


# --- reconcile: where the sink partitions the fingerprints do not prove complete are examined -----

# The rows (five columns, about 60 bytes each in Arrow) weigh more on the driver above this than
# the fixed cost of the Spark queries is worth.
EXAMINE_DRIVER_MAX_ROWS: Final = 1_000_000


def examine_route(rows: int, max_rows: int = EXAMINE_DRIVER_MAX_ROWS) -> str:
    """Where the per-bucket examination of the partitions left to examine runs: read once onto the
    driver when they hold at most ``max_rows`` rows in their ranges, else by Spark."""
    return DRIVER if rows <= max_rows else SPARK


def examine_tasks(rows: int, parallelism: int, max_rows: int = EXAMINE_DRIVER_MAX_ROWS) -> int:
    """How many Spark tasks share the examination of ``rows`` rows: enough that no task's Python
    worker holds more rows than the driver route would (each holds its rows at once), and at
    least ``parallelism`` (the executors' cores) so that every core takes part."""
    return max(1, parallelism, -(-rows // max(1, max_rows)))
