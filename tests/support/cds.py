"""Dump the class-data sharing archive the suite's Spark drivers map (tests/support/jvm_options.py).

`make test` runs ``python -m tests.support.cds`` before pytest. When the archive for this JVM and
jar set is missing, one local Spark session writes, reads and aggregates a Delta table with
``-XX:ArchiveClassesAtExit``; the JVM writes the archive as it exits, into a private file that is
renamed into place whole, so a JVM never maps half an archive. A failed dump costs nothing but the
speed: the drivers then start without an archive.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.jvm_options import BASE_OPTIONS, cds_archive

DUMP_TIMEOUT_S = 600

# Run in a child interpreter, which prints its driver JVM's pid: that JVM exits (writing the archive)
# once the interpreter has ended, and only then is the archive renamed into place.
SESSION = """
import os, sys
from app.config import SparkConfig
from app.runtime import jvm
from app.runtime.spark import build_spark_session

work, options = sys.argv[1], sys.argv[2]
cfg = SparkConfig(mode="local", master="local[2]", shuffle_partitions=2, driver_java_options=options)
spark = build_spark_session(cfg, jvm.spark_extra_jars(), os.path.join(work, "warehouse"), environ={})
table = os.path.join(work, "t")
spark.range(100).selectExpr("id", "id % 3 AS k").write.format("delta").save(table)
spark.read.format("delta").load(table).groupBy("k").count().collect()
print("driver-pid", spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
spark.stop()
"""


def dump(archive: Path) -> bool:
    """Dump the archive unless it exists; True when it exists afterwards."""
    if archive.exists():
        return True
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f"{archive.stem}.{os.getpid()}.tmp")
    options = " ".join([*BASE_OPTIONS, f"-XX:ArchiveClassesAtExit={tmp}"])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="offset-audit-cds-") as work:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", SESSION, work, options],
                capture_output=True,
                text=True,
                timeout=DUMP_TIMEOUT_S,
                check=False,
            )
            written = proc.returncode == 0 and exited(driver_pid(proc.stdout), started + DUMP_TIMEOUT_S)
            why = proc.stderr[-2000:]
        except (subprocess.TimeoutExpired, ValueError) as exc:  # ValueError: no pid printed
            written, why = False, str(exc)
    # Renamed only once the JVM is gone: a JVM still writing it would leave half an archive.
    if not written or not tmp.exists() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        print(f"no class-data sharing archive (the drivers start without one): {why}")
        return False
    os.replace(tmp, archive)
    seconds = time.monotonic() - started
    print(f"class-data sharing archive for the suite's Spark drivers: {archive} ({seconds:.0f}s)")
    drop_stale(archive)
    return True


def drop_stale(archive: Path) -> None:
    """Remove the archives of other jar sets (each is ~180 MB; a reinstalled virtualenv makes a new
    one). A JVM that maps one keeps its mapping; one started later runs without."""
    for other in archive.parent.glob("spark-driver-*.jsa"):
        if other != archive:
            other.unlink(missing_ok=True)


def driver_pid(stdout: str) -> int:
    """The pid the session printed; the dumping JVM prints its own lines around it."""
    [pid] = re.findall(r"^driver-pid (\d+)$", stdout, flags=re.MULTILINE)
    return int(pid)


def exited(pid: int, deadline: float) -> bool:
    """The JVM writes the archive while it exits: poll until it is gone; False at the deadline."""
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def main() -> int:
    archive = cds_archive()
    if archive is None:
        print("no class-data sharing archive: the Spark classpath is not resolved yet (make setup)")
        return 0
    dump(archive)
    return 0  # never fails the suite: without the archive it is only slower


if __name__ == "__main__":
    raise SystemExit(main())
