"""The one rule for times without a zone: a naive datetime is a UTC wall time.

Every table holds UTC instants (CONTRACTS.md section 3), and every reader of this application
gets either aware values (delta-rs and Arrow read Delta's TIMESTAMP as UTC instants) or naive UTC
wall times (DuckDB over ``reconcile.ledger.sql.naive_utc`` tables; a time given without zone on the
command line, which the contract reads as UTC). Only Spark's ``collect`` hands out naive *local*
times, because it converts to the Python process's zone; code that takes times from it converts
them there (``value.astimezone(UTC)`` reads a naive value as local time), before they meet this rule.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar, overload

T = TypeVar("T")


@overload
def instant(value: datetime) -> datetime: ...


@overload
def instant(value: T) -> T: ...


def instant(value: object) -> object:
    """``value`` as an aware datetime when it is a datetime (a naive one is UTC), else unchanged."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value
