"""`make dist`: a wheel and a `--py-files` zip that carry the whole library, and whose public API
(`app.audit`) imports outside the repository, with no config files, starting no JVM.

In the cluster tier beside the other readers of the `--py-files` zip: the ``dist`` fixture builds
it once a session for them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.cluster.submit import py_files_of, wheel_of

pytestmark = pytest.mark.cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 300

# Run in a directory of its own: records every file opened while `app.audit` is imported.
PROBE = """
import json, sys
opened = []
def watch(event, args):
    if event == "open" and isinstance(args[0], str):
        opened.append(args[0])
sys.addaudithook(watch)
from app import audit
from pyspark import SparkContext
print(json.dumps({
    "file": audit.__file__,
    "api": sorted(audit.__all__),
    "documented": all(getattr(audit, name).__doc__ for name in ("attach", "Attachment", "import_checkpoint")),
    "config_files": [p for p in opened if p.endswith((".yaml", ".yml")) or "/conf/" in p],
    "jvm": SparkContext._gateway is not None or SparkContext._active_spark_context is not None,
}))
"""


def library_files() -> set[str]:
    """What the library is made of in the repository: every module and the data it reads."""
    app = REPO_ROOT / "app"
    files = {p for p in app.rglob("*.py") if "__pycache__" not in p.parts}
    files |= {app / "py.typed", *(app / "report" / "static").iterdir()}
    return {str(p.relative_to(REPO_ROOT)) for p in files}


def import_probe(path_entry: Path, cwd: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFSET_AUDIT", "PYTHONPATH"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(path_entry)},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_make_dist_ships_the_library_and_its_api_imports_anywhere_without_config(
    dist: Path, tmp_path: Path
) -> None:
    wheel, py_files = wheel_of(dist), py_files_of(dist)

    expected = library_files()
    for archive in (wheel, py_files):
        with zipfile.ZipFile(archive) as zf:
            names = set(zf.namelist())
        assert expected - names == set(), archive.name

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    elsewhere = tmp_path / "a-job-of-its-own"
    elsewhere.mkdir()
    for entry in (site, py_files):
        probe = import_probe(entry, elsewhere)
        assert str(probe["file"]).startswith(str(entry)), probe  # not this checkout's copy
        api = probe["api"]
        assert isinstance(api, list)
        assert {"attach", "Attachment", "import_checkpoint"} <= set(api)
        assert probe["documented"] is True
        assert probe["config_files"] == []
        assert probe["jvm"] is False
