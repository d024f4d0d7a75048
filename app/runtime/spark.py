"""The one place a SparkSession is made: Delta and Iceberg enabled (one Spark catalog per catalog of
`iceberg.catalogs`, so a user's job and the audit name the same tables), Kafka connector on the
classpath, UTC.

Locally it is sized for a small machine. Under spark-submit on a real cluster (mode 'auto' detects it,
'cluster' forces it) the session the launcher configured is taken as it is: we add only the SQL
settings we rely on, and never master, memory or jars, which belong to the cluster.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from py4j.java_gateway import JavaGateway
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from app.config import IcebergCatalogConfig, IcebergConfig, SparkConfig
from app.runtime.child_processes import Preexec, chain_preexec, parent_death_preexec
from app.runtime.log_config import driver_log_options

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
# Iceberg's Spark catalog types by the config's (a SQL catalog is Iceberg's JDBC catalog).
_SPARK_CATALOG_TYPES: Mapping[str, str] = {"hadoop": "hadoop", "sql": "jdbc", "rest": "rest"}

# Settings the application's logic relies on, in every mode.
REQUIRED_SQL_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # The check's rules are parameterized SQL (app.quality.engines). Delta's SQL parser does not pass
    # Spark 4.1's parameters through to it (delta-io/delta#7640), so markers stay unbound unless
    # Spark binds them in the analyzer, as it did before 4.1.
    "spark.sql.legacy.parameterSubstitution.constantsOnly": "true",
}


def running_under_spark_submit(environ: Mapping[str, str] | None = None) -> bool:
    """spark-submit starts the JVM first and hands the Python driver its gateway port."""
    env = os.environ if environ is None else environ
    return "PYSPARK_GATEWAY_PORT" in env


def jdbc_uri(uri: str) -> str:
    """A SQL catalog's SQLAlchemy URI (what pyiceberg takes) as the JDBC URL Iceberg's JDBC catalog
    takes: sqlite:////abs/catalog.db -> jdbc:sqlite:/abs/catalog.db, postgresql+psycopg://h/db ->
    jdbc:postgresql://h/db; a jdbc: URL as it stands."""
    if uri.startswith("jdbc:"):
        return uri
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    scheme = scheme.split("+", 1)[0]
    if scheme == "sqlite":
        return f"jdbc:sqlite:{rest[1:] if rest.startswith('/') else rest}"
    return f"jdbc:{scheme}://{rest}"


def catalog_conf(name: str, catalog: IcebergCatalogConfig) -> dict[str, str]:
    """The Spark settings of one Iceberg catalog of `iceberg.catalogs`."""
    prefix = f"spark.sql.catalog.{name}"
    conf = {prefix: ICEBERG_CATALOG, f"{prefix}.type": _SPARK_CATALOG_TYPES[catalog.type]}
    if catalog.warehouse:
        conf[f"{prefix}.warehouse"] = catalog.warehouse
    if catalog.uri:
        conf[f"{prefix}.uri"] = jdbc_uri(catalog.uri) if catalog.type == "sql" else catalog.uri
    conf.update({f"{prefix}.{key}": value for key, value in catalog.properties.items()})
    return conf


def iceberg_conf(iceberg: IcebergConfig) -> dict[str, str]:
    """Every configured Iceberg catalog as a Spark catalog of the same name."""
    conf: dict[str, str] = {}
    for name, catalog in sorted(iceberg.catalogs.items()):
        conf.update(catalog_conf(name, catalog))
    return conf


def local_conf(
    cfg: SparkConfig,
    jars: Sequence[Path],
    warehouse_dir: str,
    log_level: int = logging.INFO,
    iceberg: IcebergConfig | None = None,
) -> dict[str, str]:
    """Everything a local session needs, as plain key/values so tests can check it without a JVM.

    `log_level` is the Python side's (--log-level): the driver JVM's log levels follow it
    (app.runtime.log_config).
    """
    # The user's options last: for a JVM flag given twice, the last one wins.
    own = ["-Duser.timezone=UTC", *driver_log_options(log_level)]
    driver_options = " ".join([*own, cfg.driver_java_options] if cfg.driver_java_options.strip() else own)
    conf = {
        "spark.master": cfg.master,
        "spark.app.name": cfg.app_name,
        "spark.driver.memory": cfg.driver_memory,
        "spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
        "spark.default.parallelism": str(cfg.shuffle_partitions),
        # Both formats' SQL (Delta's RESTORE, Iceberg's CALL ... system.*): the jars are on the classpath.
        "spark.sql.extensions": f"{DELTA_EXTENSION},{ICEBERG_EXTENSION}",
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.warehouse.dir": warehouse_dir,
        "spark.ui.enabled": "false",
        # Loopback only: a local run needs no network interface (and must not pick a public one).
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "true",
        # JVM time zone as well as the SQL one: Delta's commit timestamps and our clocks agree.
        # The driver's log configuration too (the local executors are threads of the driver).
        "spark.driver.extraJavaOptions": driver_options,
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.jars": ",".join(str(j) for j in jars),
        # Tiny local tables: fewer, smaller Delta log checkpoints and no stats collection storms.
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    }
    conf.update(REQUIRED_SQL_CONF)
    conf.update(iceberg_conf(iceberg or IcebergConfig()))
    conf.update(cfg.conf)  # the user's spark.conf wins over our defaults
    return conf


def build_spark_session(
    cfg: SparkConfig,
    jars: Sequence[Path] = (),
    warehouse_dir: str = "data/warehouse",
    environ: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    iceberg: IcebergConfig | None = None,
) -> SparkSession:
    on_cluster = cfg.mode == "cluster" or (cfg.mode == "auto" and running_under_spark_submit(environ))
    if on_cluster:
        log.info("using the SparkSession configured by spark-submit (cluster mode)")
        spark = SparkSession.builder.appName(cfg.app_name).getOrCreate()
        # A catalog is loaded on its first use: settable on a running session, unlike extensions.
        for key, value in {
            **REQUIRED_SQL_CONF,
            **iceberg_conf(iceberg or IcebergConfig()),
            **cfg.conf,
        }.items():
            if key.startswith("spark.sql."):
                spark.conf.set(key, value)
        _require_delta(spark)
        apply_storage_options(spark, storage_options or {})
        return spark
    # Local Python workers (mapInArrow, UDFs) must run this interpreter, not whatever 'python3' is on
    # PATH, to see the same packages (pyarrow, app). SparkContext reads only the environment for this.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = local_conf(cfg, jars, warehouse_dir, logging.getLogger().getEffectiveLevel(), iceberg)
    # Spark picks its own host from this variable, or warns that the machine's name resolves to a
    # loopback address and takes another interface; the driver binds to loopback anyway.
    os.environ.setdefault("SPARK_LOCAL_IP", conf["spark.driver.bindAddress"])
    start_driver_dying_with_us(conf, environ)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    # Takes the context started above, if any. Its log levels come from the driver's log4j2
    # configuration (local_conf): no setLogLevel, which would override --log-level DEBUG.
    spark = builder.getOrCreate()
    apply_storage_options(spark, storage_options or {})
    log.info("local SparkSession %s (%s), %d extra jars", spark.version, cfg.master, len(jars))
    return spark


# pyspark's launcher carries no annotations; this names what it returns.
_launch_gateway: Callable[..., JavaGateway] = launch_gateway


class DriverPopenKwargs(dict[str, Any]):
    """`popen_kwargs` for pyspark's launch_gateway that keep a preexec_fn of ours.

    launch_gateway (pyspark/java_gateway.py) stores its own preexec_fn, which ignores SIGINT, over
    any it is given; this mapping chains ours after theirs instead of letting it be replaced.
    """

    def __init__(self, preexec: Preexec) -> None:
        super().__init__(preexec_fn=preexec)
        self.ours = preexec

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "preexec_fn" and value is not self.ours:
            value = chain_preexec(value, self.ours)
        super().__setitem__(key, value)


def start_driver_dying_with_us(conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> bool:
    """Start the local driver JVM and its SparkContext with the parent-death signal set.

    pyspark ties the driver JVM to this process only through its stdin: the JVM exits on EOF. That
    leaves it running while anything else holds the pipe, and during any phase in which it is not
    reading stdin yet. So the JVM gets SIGTERM from the kernel when this process dies, in every
    phase. Nothing to do when a JVM is already up (a second session in this process), under
    spark-submit (its JVM came first), or where parent_death_preexec cannot promise it; the session
    is then started the usual way. Returns whether it started the driver.
    """
    # pyspark keeps its one gateway in this class attribute and offers no public way to ask for it.
    if SparkContext._gateway is not None or running_under_spark_submit(environ):
        return False
    preexec = parent_death_preexec()
    if preexec is None:
        return False
    spark_conf = SparkConf().setAll(list(conf.items()))
    # The same conf the builder would hand over: spark-submit gets it as --conf (memory, jars, ...).
    gateway = _launch_gateway(spark_conf, popen_kwargs=DriverPopenKwargs(preexec))
    SparkContext(conf=spark_conf, gateway=gateway)
    return True


def apply_storage_options(spark: SparkSession, options: Mapping[str, str]) -> None:
    """Object-storage properties (config section `storage.options`) into the driver's Hadoop
    configuration, before any table is touched.

    Not as `spark.hadoop.*` Spark settings: those are fixed when the context starts (under
    spark-submit, before this code runs) and show up in the UI and event log. Every file scan and
    write copies this configuration into its tasks, so executors reach the storage with it too, and
    delta-rs takes its s3a settings from here for the driver-side tables (`storage.backend`).
    """
    if not options:
        return
    # pyspark exposes the Hadoop configuration only through the Java context.
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in options.items():
        hadoop_conf.set(key, value)
    log.info("storage options set: %s", ", ".join(sorted(options)))  # names only, never values


def stop_under_spark_submit(environ: Mapping[str, str] | None = None) -> bool:
    """Stop the running SparkContext when spark-submit launched this process: the cluster manager
    and the event log then see an application that finished, before the process leaves without the
    interpreter's shutdown (``app.cli.run_and_exit``). A local driver JVM needs nothing: it dies with
    this process. Returns whether a context was stopped."""
    # pyspark keeps the running context in this class attribute and offers no public way to ask for it.
    context = SparkContext._active_spark_context
    if context is None or not running_under_spark_submit(environ):
        return False
    try:
        context.stop()
    except Exception:  # broad on purpose: the command's exit code is what the scheduler must get
        log.warning("could not stop the SparkContext cleanly", exc_info=True)
        return False
    return True


def _require_delta(spark: SparkSession) -> None:
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if DELTA_EXTENSION not in extensions:
        log.warning(
            "spark.sql.extensions lacks %s; pass --packages io.delta:delta-spark_4.1_2.13:4.4.0 and "
            "--conf spark.sql.extensions=%s to spark-submit",
            DELTA_EXTENSION,
            DELTA_EXTENSION,
        )
