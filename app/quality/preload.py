"""Importing Great Expectations ahead of the check, in a background thread.

The import alone takes 5 s on a quiet 2-core machine and over 15 s on a busy one: more than
validating a night's audit tables. A process that will run the check (the nightly, the `check`
command) starts the import first, so it overlaps with work that waits on the JVM or on Kafka
(the Spark session's start, ingest-offsets, reconcile's sink scan) instead of adding to it.
"""

from __future__ import annotations

import importlib
import logging
import threading

log = logging.getLogger(__name__)

MODULE = "app.quality.checks"  # imports great_expectations and the suites


def _import() -> None:
    try:
        importlib.import_module(MODULE)
    except Exception:  # broad on purpose: the check imports it again and reports what fails
        log.debug("importing %s ahead of the check failed", MODULE, exc_info=True)


_started: list[threading.Thread] = []  # at most one import per process
_lock = threading.Lock()


def start() -> threading.Thread:
    """Start importing the check's modules, once per process; the check's own import then waits
    for it (Python's import lock) or finds it done."""
    with _lock:
        if not _started:
            thread = threading.Thread(target=_import, name="preload-checks", daemon=True)
            thread.start()
            _started.append(thread)
        return _started[0]
