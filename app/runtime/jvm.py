"""JVM classpaths resolved from Maven Central with the machine's Maven, from the poms in conf/jvm/.

The jars stay in the local Maven repository (outside git). The resolved classpath is remembered in a
small file under the cache directory, keyed by a hash of the pom, so a second run neither calls the
network nor waits for Maven.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
from pathlib import Path

from app.errors import JvmSetupError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
JVM_CONF_DIR = REPO_ROOT / "conf" / "jvm"
# flink-*: a MiniCluster, the Kafka connector and the State Processor API per Flink stack, for the tests;
# flink-1.20-iceberg: Iceberg's Flink sink and a Hadoop client, added to flink-1.20's by the tests of it.
CLASSPATH_NAMES = ("spark", "kafka", "s3", "flink-1.20", "flink-2.2", "flink-1.20-iceberg")
MAVEN_TIMEOUT_S = 1800


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "offset-audit"


def pom_path(name: str) -> Path:
    if name not in CLASSPATH_NAMES:
        raise JvmSetupError(f"unknown classpath '{name}', expected one of {CLASSPATH_NAMES}")
    return JVM_CONF_DIR / name / "pom.xml"


def classpath_file(name: str, cache_dir: Path) -> Path:
    digest = hashlib.sha256(pom_path(name).read_bytes()).hexdigest()[:16]
    return cache_dir / "jvm" / f"{name}-{digest}.classpath"


def parse_classpath(text: str) -> list[Path]:
    return [Path(p) for p in text.strip().split(":") if p]


def _run_maven(name: str, out_file: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmSetupError("Maven ('mvn') is not on PATH; run 'make setup' or install maven")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn, "-B", "-q",
        "-gs", str(JVM_CONF_DIR / "settings.xml"),
        "-f", str(pom_path(name)),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={out_file.resolve()}",
    ]  # fmt: skip
    log.info("resolving the %s classpath with Maven (first run downloads jars)", name)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise JvmSetupError(f"Maven did not resolve the {name} classpath in {MAVEN_TIMEOUT_S}s") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise JvmSetupError(f"Maven failed to resolve the {name} classpath:\n{tail}")


def resolve_classpath(name: str, cache_dir: Path | None = None) -> list[Path]:
    """Jars of one classpath, resolving with Maven only when the cached answer is missing or stale."""
    # absolute: Maven resolves a relative output file against the pom's directory, not ours
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    cp_file = classpath_file(name, cache)
    if cp_file.exists():
        jars = parse_classpath(cp_file.read_text())
        if jars and all(j.exists() for j in jars):
            return jars
        log.info("cached %s classpath points at missing jars; resolving again", name)
    tmp = cp_file.with_suffix(".tmp")
    _run_maven(name, tmp)
    jars = parse_classpath(tmp.read_text())
    missing = [str(j) for j in jars if not j.exists()]
    if not jars or missing:
        raise JvmSetupError(f"Maven reported a {name} classpath with missing jars: {missing[:3]}")
    tmp.replace(cp_file)  # atomic: a killed run never leaves a half-written classpath behind
    return jars


_VERSION_SEGMENT = re.compile(r"^\d+\.\d+")


def artifact_name(jar: Path) -> str:
    """'jackson-core-2.13.5.jar' -> 'jackson-core': everything before the first dotted-version segment.

    A bare digit is not enough: 'spark-sql-kafka-0-10_2.13-4.1.3' has '0' inside its artifact id.
    """
    stem = jar.name.removesuffix(".jar")
    parts = stem.split("-")
    for i, part in enumerate(parts):
        if i > 0 and _VERSION_SEGMENT.match(part):
            return "-".join(parts[:i])
    return stem


def pyspark_jar_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def spark_extra_jars(cache_dir: Path | None = None, provided_dir: Path | None = None) -> list[Path]:
    """Delta and the Kafka connector, minus every artifact pyspark already ships.

    Maven pulls Delta's own Jackson, Hadoop, Parquet and logging jars in older versions; putting those
    next to Spark's copies invites NoSuchMethodErrors, so Spark's own copy always wins.
    """
    provided = {artifact_name(j) for j in (provided_dir or pyspark_jar_dir()).glob("*.jar")}
    return [j for j in resolve_classpath("spark", cache_dir) if artifact_name(j) not in provided]
