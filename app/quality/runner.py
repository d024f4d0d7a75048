"""The Great Expectations runner: the suites of ``checks.suites`` over the check's frames, in an
ephemeral context, with typed outcomes and Data Docs.

A frame in pandas (a table validated on the driver) goes to GE's pandas data source, with no Spark
job at all; a Spark DataFrame (a table too large for the driver) to GE's Spark data source on the
session that made it, which runs a Spark job per metric bundle. Both report the same results; on
tiny tables the Spark route costs tens of seconds of job scheduling for a few hundred rows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import pandas as pd

from app.quality.frames import Frame
from app.quality.outcomes import ExpectationOutcome, SuiteOutcome
from checks.suites import SuiteSpec

log = logging.getLogger(__name__)


def gx_context(data_docs_dir: str | None) -> Any:
    """An in-memory GE context (nothing written but Data Docs), quiet and offline."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    sites = {}
    if data_docs_dir:
        sites["offset_audit"] = {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": data_docs_dir},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites=sites,
        analytics_enabled=False,  # the network is closed, and nobody asked to be counted
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _json_value(value: Any) -> Any:
    """GE's results hold numpy scalars and timestamps on the pandas route: plain JSON values, so
    both routes store the same observed values."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()  # numpy scalars
    if hasattr(value, "isoformat"):
        return str(value.to_pydatetime() if hasattr(value, "to_pydatetime") else value)
    return str(value)


_ROW_POSITION_KEYS: Final = frozenset({"partial_unexpected_index_list", "unexpected_index_list"})


def outcomes_of(spec: SuiteSpec, result: Any) -> tuple[ExpectationOutcome, ...]:
    """GE's suite result as typed outcomes; an expectation that raised counts as failed."""
    out = []
    for r in result.results:
        cfg = r.expectation_config
        kwargs = {k: v for k, v in dict(cfg.kwargs).items() if k != "batch_id"}
        # Row positions in the collected frame (pandas route only) name no row of the table.
        observed = {k: v for k, v in dict(r.result or {}).items() if k not in _ROW_POSITION_KEYS}
        exc = r.exception_info or {}
        if exc.get("raised_exception"):
            observed["exception"] = exc.get("exception_message")
        out.append(
            ExpectationOutcome(
                suite=spec.name,
                table=spec.table,
                expectation=str(cfg.type),
                kwargs=json.loads(json.dumps(kwargs, default=_json_value)),
                severity=str((cfg.meta or {}).get("severity", "error")),
                success=bool(r.success),
                observed=json.loads(json.dumps(observed, default=_json_value)),
            )
        )
    return tuple(out)


# Spark's nullable integers and booleans as pandas' nullable dtypes: numpy's would turn an int
# column with a null into floats (3 -> 3.0 in every observed value).
def validate_suites(
    specs: Sequence[SuiteSpec],
    frames: Mapping[str, Frame | None],
    *,
    run_id: str,
    now: datetime,
    data_docs_dir: str | None = None,
) -> tuple[tuple[SuiteOutcome, ...], str | None]:
    """Run every suite over its frame; returns the outcomes and the Data Docs index URL."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    context = gx_context(data_docs_dir)
    # The frames are handed over as batches: GE computes in pandas on the driver, or on the
    # session that made the frame.
    sources: dict[str, Any] = {}

    def source(route: str) -> Any:
        # Made when first needed: GE's Spark source gets (or starts) a session, which a night
        # whose tables all fit on the driver never needs.
        if route not in sources:
            if route == "pandas":
                sources[route] = context.data_sources.add_pandas(name="offset_audit_driver")
            else:
                sources[route] = context.data_sources.add_spark(name="offset_audit")
        return sources[route]

    run = RunIdentifier(run_name=run_id, run_time=now)
    outcomes: list[SuiteOutcome] = []
    for spec in specs:
        df = frames.get(spec.frame)
        if df is None:
            outcomes.append(SuiteOutcome(spec.name, spec.table, skipped=f"table {spec.table} does not exist"))
            continue
        started = time.monotonic()
        route = "pandas" if isinstance(df, pd.DataFrame) else "spark"
        asset = source(route).add_dataframe_asset(name=spec.name)
        batch = asset.add_batch_definition_whole_dataframe("whole")
        suite = context.suites.add(gx.ExpectationSuite(name=spec.name))
        for c in spec.checks:
            suite.add_expectation(c.expectation)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=spec.name, data=batch, suite=suite)
        )
        if isinstance(df, pd.DataFrame):
            result = definition.run(batch_parameters={"dataframe": df}, run_id=run)
        else:
            cached = df.persist()  # GE runs one Spark job per metric bundle over the same frame
            try:
                result = definition.run(batch_parameters={"dataframe": cached}, run_id=run)
            finally:
                cached.unpersist()
        outcomes.append(SuiteOutcome(spec.name, spec.table, outcomes_of(spec, result)))
        verdict = "passed" if outcomes[-1].success else "FAILED"
        log.info("suite %s (%s): %s in %.1fs", spec.name, route, verdict, time.monotonic() - started)
    docs = None
    if data_docs_dir and any(o.skipped is None for o in outcomes):
        docs = context.build_data_docs(site_names=["offset_audit"]).get("offset_audit")
    return tuple(outcomes), docs
