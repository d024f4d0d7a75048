"""The JVM options of the Spark and Flink JVMs the suite starts: local Spark drivers, the cluster
tier's daemons, drivers and executors, and the Flink tier's MiniClusters. (The Kafka brokers keep
the JVM's defaults: each lives a whole session.)

These JVMs live seconds to minutes on tiny data, where C2's compiler threads and G1's workers only
compete for the machine's two cores: C1 alone and the serial collector start them faster. C1 alone
also shrinks the default code cache from 240 MB to 48 MB, which a driver running the demo's eight
incidents fills; the JVM then disables its compiler for the rest of its life and prints ten lines
of warnings. The code cache keeps the size a full JVM gets.

The suite starts about a hundred local Spark drivers, and loading Spark's classes is most of what
each one's start costs. `make test` first dumps the classes one driver loads into a class-data
sharing archive (tests/support/cds.py, once per JVM, Spark and jar set); every JVM given these
options then maps them instead (measured: 7 CPU-seconds instead of 10 for a session that writes
and reads one Delta table). A JVM whose classpath is not the archive's (the cluster tier's, Flink's)
ignores it, and ``-Xlog:cds...=off`` keeps that, or a missing archive, from printing a warning.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from app.runtime import jvm

BASE_OPTIONS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:ReservedCodeCacheSize=240m",
    "-XX:+UseSerialGC",
)
QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"


def cds_archive(cache_dir: Path | None = None) -> Path | None:
    """Where the archive for this JVM, pyspark and Spark classpath lives (it may not exist yet), or
    None when the classpath was never resolved (`make setup` does that)."""
    cache = (cache_dir or jvm.default_cache_dir()).expanduser()
    java = shutil.which("java")
    try:
        cp_file = jvm.classpath_file("spark", cache)
        extra = cp_file.read_text() if cp_file.exists() else None
        spark_jars = sorted(jvm.pyspark_jar_dir().glob("*.jar"))
    except OSError:
        return None
    if java is None or extra is None:
        return None
    digest = hashlib.sha256()
    runtime = Path(java).resolve().parent.parent / "lib" / "modules"
    for part in (str(Path(java).resolve()), str(runtime.stat().st_size if runtime.exists() else 0), extra):
        digest.update(part.encode() + b"\0")
    # The JVM maps an archive only while every jar on the classpath has the size and modification
    # time it had at the dump, and otherwise ignores it without a word (the log is off): a
    # reinstalled virtualenv (a fresh clone beside a kept cache) rewrites pyspark's jars with new
    # times, so the key holds both and such a jar set gets an archive of its own.
    for jar in [*spark_jars, *(Path(j) for j in extra.split(os.pathsep) if j)]:
        digest.update(jar_stamp(jar).encode() + b"\0")
    digest.update(" ".join(BASE_OPTIONS).encode())
    return cache / "cds" / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def jar_stamp(jar: Path) -> str:
    """What the JVM checks of a classpath entry before it maps an archive: its size and mtime."""
    try:
        stat = jar.stat()
    except OSError:
        return f"{jar}:missing"
    return f"{jar}:{stat.st_size}:{stat.st_mtime_ns}"


def cds_options(archive: Path | None) -> tuple[str, ...]:
    return (f"-XX:SharedArchiveFile={archive}", QUIET_CDS) if archive is not None and archive.exists() else ()


QUICK_JVM_OPTIONS = BASE_OPTIONS + cds_options(cds_archive())
QUICK_JVM = " ".join(QUICK_JVM_OPTIONS)
