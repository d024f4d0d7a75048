"""The one way a test configures the application: the `local` profile with the test's settings on
top, in the form a user writes them (`--set section.key=value`), read by the application's own
loader. So every test's configuration is layered, substituted and validated as a user's is, and a
test that runs the CLI passes the very same settings on its command line (`set_options`).

Settings come as ``key=value`` strings or, for a whole section, as keywords:
``build_config("reconcile.confirm_gaps=false", data_dir=tmp_path, kafka={"bootstrap_servers": b})``.
A keyword's values are written as JSON, which the loader's YAML reads back unchanged (a string
stays a string, a list a list); a pass-through property (`kafka.client.*`, `storage.options.*`)
is kept exactly as typed, so it goes in ``items``. Tests of the loader itself (test_config.py and
the other unit tests of what a file or a setting is rejected or resolved to) call `load_config`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from app.config import AppConfig, load_config
from tests.support import jvm_options

PROFILE = "local"

# Every local Spark driver a test starts (its own session, the CLI's, a user job's) runs with the
# suite's quick JVM options, as the cluster and Flink tiers' JVMs do (a third of two Kafka modules'
# CPU seconds). A test may set it otherwise.
QUICK_JVM = f"spark.driver_java_options={jvm_options.QUICK_JVM}"


def settings(*items: str, data_dir: Path | str | None = None, **sections: Mapping[str, object]) -> list[str]:
    """``key=value`` settings: the quick JVM, ``paths.data_dir`` (when given), ``items``, then each
    section's keys."""
    out = [QUICK_JVM] if data_dir is None else [QUICK_JVM, f"paths.data_dir={data_dir}"]
    out += items
    for section, values in sections.items():
        out += [f"{section}.{key}={json.dumps(value)}" for key, value in values.items()]
    return out


def build_config(
    *items: str,
    data_dir: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    **sections: Mapping[str, object],
) -> AppConfig:
    """The configuration of these settings (see `settings`); ``environ`` is what their `${VAR}`
    references read (none: a test never reads the developer's environment)."""
    overrides = settings(*items, data_dir=data_dir, **sections)
    return load_config(PROFILE, overrides=overrides, environ=environ or {})


def set_options(
    *items: str, data_dir: Path | str | None = None, **sections: Mapping[str, object]
) -> list[str]:
    """The same settings as a command line's `--set` options."""
    return [arg for item in settings(*items, data_dir=data_dir, **sections) for arg in ("--set", item)]
