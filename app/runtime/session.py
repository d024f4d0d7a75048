"""Build the live resources a command needs from the frozen config: Spark session, Kafka address,
the storage settings of driver-side table reads.

Commands call these at their start, never at import time.
"""

from __future__ import annotations

from pyspark import SparkContext
from pyspark.sql import SparkSession

from app.config import AppConfig
from app.kafka.clients import resolve_bootstrap
from app.runtime import jvm
from app.runtime.spark import build_spark_session, running_under_spark_submit
from app.storage.backend import StorageSettings


def spark_session(cfg: AppConfig) -> SparkSession:
    on_cluster = cfg.spark.mode == "cluster" or (cfg.spark.mode == "auto" and running_under_spark_submit())
    jars = [] if on_cluster else jvm.spark_extra_jars(cfg.paths.cache_dir)
    return build_spark_session(
        cfg.spark,
        jars,
        cfg.paths.under("warehouse"),
        storage_options=cfg.storage.options,
        iceberg=cfg.iceberg,
    )


def kafka_bootstrap(cfg: AppConfig) -> str:
    return resolve_bootstrap(cfg.kafka, cfg.paths.kafka_dir)


def table_storage(cfg: AppConfig) -> StorageSettings:
    """The storage settings for the tables a command reads on the driver with delta-rs, starting
    no JVM where none runs: a person's `incidents` or repair plan answers in about a second.

    Under spark-submit the launcher's JVM runs already and its Hadoop configuration holds the
    cluster's own s3a defaults (spark-defaults' ``spark.hadoop.*``, core-site.xml) beside config
    ``storage.options``: the session is used. So it is when this process has started one. Otherwise
    the config's ``storage.options`` are all the settings there are.
    """
    # pyspark keeps the running context in this class attribute and offers no public way to ask for it.
    if running_under_spark_submit() or SparkContext._active_spark_context is not None:
        return spark_session(cfg)
    return cfg.storage
