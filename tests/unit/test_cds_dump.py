"""The archive dump's bookkeeping (tests/support/cds.py): which pid it waits for, that it only
takes an archive whose JVM has exited, the archive's key (tests/support/jvm_options.py) and the
stale archives it drops."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.runtime import jvm
from tests.support import jvm_options
from tests.support.cds import driver_pid, drop_stale, exited

pytestmark = pytest.mark.unit


def test_the_driver_pid_is_found_among_the_dumping_jvms_own_lines() -> None:
    out = "[warning][cds] Skipping Foo\ndriver-pid 4242\nSkipping jdk/internal/reflect/Generated12\n"
    assert driver_pid(out) == 4242
    with pytest.raises(ValueError, match="not enough values"):
        driver_pid("Skipping jdk/internal/reflect/Generated12\n")


def test_a_jvm_still_running_at_the_deadline_is_not_taken_as_exited() -> None:
    assert not exited(os.getpid(), time.monotonic() + 0.3)
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    assert exited(int(child.stdout), time.monotonic() + 5)


def test_the_archive_key_changes_with_a_jars_modification_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The JVM ignores an archive, silently, once a classpath jar's mtime differs from the dump's
    # (a reinstalled virtualenv): such a jar set must get an archive of its own.
    jar = tmp_path / "lib.jar"
    jar.write_bytes(b"jar")
    classpath = jvm.classpath_file("spark", tmp_path)
    classpath.parent.mkdir(parents=True, exist_ok=True)
    classpath.write_text(str(jar))
    monkeypatch.setattr("tests.support.jvm_options.shutil.which", lambda _: str(tmp_path / "java"))
    before = jvm_options.cds_archive(tmp_path)
    assert before is not None
    assert jvm_options.cds_archive(tmp_path) == before  # the same jars: the same archive
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    assert jvm_options.cds_archive(tmp_path) not in (None, before)


def test_a_new_archive_drops_the_archives_of_other_jar_sets(tmp_path: Path) -> None:
    kept, stale = tmp_path / "spark-driver-a.jsa", tmp_path / "spark-driver-b.jsa"
    other = tmp_path / "flink.jsa"
    for f in (kept, stale, other):
        f.write_bytes(b"x")
    drop_stale(kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flink.jsa", "spark-driver-a.jsa"]
