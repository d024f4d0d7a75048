"""Which engine writes a table (`engine_for`, by the table's role), the same on every storage.

Two engines write the same Delta protocol. Spark writes a DataFrame where the rows scale with the
data (the sink, the decoded `__consumer_offsets` of the Spark route); delta-rs (through
`delta_rows`) writes Arrow rows from the driver, in milliseconds and without a task slot, where
they are few (the ledger, positions and every audit table). A table's handle
(`storage.handles`) takes its engine from here and refuses rows in a form that engine does not
write. Ingest takes the decoded tables' handles on its route's engine; snapshot mode appends its
few Admin API rows to group_commits through Spark whatever the route, on the handle it asks for
the Spark engine. A module never picks a Delta writer of its own. Only this package imports
`deltalake` or calls Spark's Delta reader or writer (`tests/unit/test_storage_facade.py`).
"""

from __future__ import annotations

from typing import Final

from app.routes import DRIVER, ROUTES, SPARK
from app.storage.tables import TABLE_NAMES

# Tables whose every write scales with the data: Spark writes them on every storage.
SPARK_TABLES: Final = frozenset({"sink"})
# The tables `ingest-offsets` decodes into: written by the engine of its decode route
# (`routes.decode_route`: the driver with a local master, Spark on a cluster).
ROUTED_TABLES: Final = frozenset({"group_commits", "group_events", "decode_errors"})


def engine_for(table: str, route: str | None = None) -> str:
    """The engine that writes ``table`` (one of `storage.tables.TABLE_NAMES`): Spark for what scales
    with the data, the ``route`` a size policy of `routes` chose for a routed table, else the driver.
    """
    if table not in TABLE_NAMES:
        raise ValueError(f"no table called {table!r}; known: {', '.join(TABLE_NAMES)}")
    if table in SPARK_TABLES:
        return SPARK
    if table in ROUTED_TABLES and route is not None:
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r}; expected one of {list(ROUTES)}")
        return route
    return DRIVER
