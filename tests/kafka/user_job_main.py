"""A user's streaming job as a driver process of its own, for the tests that kill it with SIGKILL:
one of `user_jobs`' jobs (default (a): Kafka payments into Delta through Spark's Delta sink),
attached in one line, one micro-batch a second until killed. Job (c) reads the topics TOPIC matches
(`subscribePattern`), the others TOPIC itself.

    python -m tests.kafka.user_job_main BOOTSTRAP TOPIC CHECKPOINT SINK LEDGER JOB DATA_DIR [a|b|c]
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.attach import attach
from app.config import SparkConfig, load_config
from app.runtime import jvm
from app.runtime.spark import build_spark_session
from tests.kafka.user_jobs import kafka, start_job


def main(argv: list[str]) -> int:
    bootstrap, topic, checkpoint, sink, ledger, job, data_dir = argv[:7]
    kind = argv[7] if len(argv) > 7 else "a"
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
    raw = kafka(spark, bootstrap, "subscribePattern" if kind == "c" else "subscribe", topic)
    query = start_job(kind, raw, checkpoint, sink, {"processingTime": "1 second"})
    attach(query, job_name=job, ledger=ledger)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
