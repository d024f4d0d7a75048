"""Build the live resources a command needs from the frozen config: Spark session, Kafka address.

Commands call these at their start, never at import time.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from app.config import AppConfig
from app.kafka.clients import resolve_bootstrap
from app.runtime import jvm
from app.runtime.spark import build_spark_session, running_under_spark_submit


def spark_session(cfg: AppConfig) -> SparkSession:
    on_cluster = cfg.spark.mode == "cluster" or (cfg.spark.mode == "auto" and running_under_spark_submit())
    jars = [] if on_cluster else jvm.spark_extra_jars(cfg.paths.cache_dir)
    return build_spark_session(
        cfg.spark, jars, cfg.paths.under("warehouse"), storage_options=cfg.storage.options
    )


def kafka_bootstrap(cfg: AppConfig) -> str:
    return resolve_bootstrap(cfg.kafka, cfg.paths.kafka_dir)
