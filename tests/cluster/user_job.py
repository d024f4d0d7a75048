"""A user's own streaming job, as a data team writes one and submits it with `spark-submit`: Kafka
JSON payments parsed, refunds filtered out, two columns kept, into a Delta table on s3a:// through
Spark's own Delta sink, its checkpoint on s3a:// too, and the audit attached in one line, which
also commits each batch to a consumer group. The library reaches it as `--py-files` of the zip
`make dist` builds; nothing of this repository's config is read.

    spark-submit ... --py-files offset_audit-<version>-py-files.zip user_job.py \
        BOOTSTRAP TOPIC CHECKPOINT SINK LEDGER JOB GROUP MAX_OFFSETS_PER_TRIGGER

The object store's address and keys come from the environment (S3_ENDPOINT, AWS_REGION,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) into the session's Hadoop configuration, which Spark
hands to every task and the ledger writer reads: the keys never enter Spark's settings or its
event log. Prints one JSON line: the query's id and whether the ledger writer finished.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app import audit

PAYMENT_SCHEMA = "id LONG, amount DOUBLE, kind STRING"
CLOSE_TIMEOUT_S = 300.0
S3A_FROM_ENV = {
    "fs.s3a.endpoint": "S3_ENDPOINT",
    "fs.s3a.endpoint.region": "AWS_REGION",
    "fs.s3a.access.key": "AWS_ACCESS_KEY_ID",
    "fs.s3a.secret.key": "AWS_SECRET_ACCESS_KEY",
}


def main(argv: list[str]) -> int:
    bootstrap, topic, checkpoint, sink, ledger, job, group, per_trigger = argv
    spark = SparkSession.builder.appName(job).getOrCreate()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, env in S3A_FROM_ENV.items():
        hadoop.set(key, os.environ[env])
    hadoop.set("fs.s3a.path.style.access", "true")  # an S3-compatible server on loopback

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
    )
    payments = (
        raw.select(F.from_json(F.col("value").cast("string"), PAYMENT_SCHEMA).alias("p"))
        .select("p.*")
        .where(F.col("kind") == "payment")
        .select("id", "amount")
    )
    query = (
        payments.writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(sink)
    )
    attachment = audit.attach(  # the one line the audit adds
        query, job_name=job, ledger=ledger, group_id=group, kafka_options={"bootstrap.servers": bootstrap}
    )
    query.awaitTermination()
    closed = attachment.close(CLOSE_TIMEOUT_S)
    failed = query.exception() is not None
    print(json.dumps({"query_id": str(query.id), "ledger_closed": closed, "query_failed": failed}))
    spark.stop()
    return 0 if closed and not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
