"""A user's streaming job as a driver process of its own, for the tests that kill it with SIGKILL:
Kafka payments into Delta through Spark's Delta sink (`user_jobs.payments`), attached in one line,
one micro-batch a second until killed.

    python -m tests.kafka.user_job_main BOOTSTRAP TOPIC CHECKPOINT SINK LEDGER JOB DATA_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.attach import attach
from app.config import SparkConfig, load_config
from app.runtime import jvm
from app.runtime.spark import build_spark_session
from tests.kafka.user_jobs import kafka, payments


def main(argv: list[str]) -> int:
    bootstrap, topic, checkpoint, sink, ledger, job, data_dir = argv
    cfg = load_config("local", overrides=[f"paths.data_dir={data_dir}"], environ={})
    spark_cfg = SparkConfig(
        **{
            **cfg.spark.__dict__,
            "mode": "local",
            "master": "local[2]",
            "driver_memory": "1g",
            "shuffle_partitions": 2,
        }
    )
    spark = build_spark_session(
        spark_cfg, jvm.spark_extra_jars(cfg.paths.cache_dir), str(Path(data_dir) / "warehouse"), environ={}
    )
    query = (
        payments(kafka(spark, bootstrap, "subscribe", topic))
        .writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start(sink)
    )
    attach(query, job_name=job, ledger=ledger)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
