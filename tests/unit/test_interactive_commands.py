"""Building the parser imports none of the engines (pyspark, pyarrow, delta-rs, Kafka's client): a
`--help` costs the interpreter's start and the config module only.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.runtime.jvm import REPO_ROOT

pytestmark = pytest.mark.unit

COMMAND_TIMEOUT_S = 120  # a deadline for a hung process, not a speed check


# What the commands' work needs and a parser does not (their imports were two thirds of `--help`'s time).
ENGINES = ("pyspark", "py4j", "pyarrow", "deltalake", "confluent_kafka", "duckdb", "great_expectations")


def test_building_the_parser_imports_no_engine() -> None:
    probe = (
        "import json, sys\n"
        "from app import cli\n"
        "cli.build_parser()\n"
        f"print(json.dumps([m for m in {ENGINES!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert (done.returncode, json.loads(done.stdout)) == (0, []), done.stderr
