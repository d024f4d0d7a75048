"""A user's streaming job as a driver process of its own, for the tests that kill it with SIGKILL or
read what it prints: one of `user_jobs`' jobs (default (a): Kafka payments into Delta through
Spark's Delta sink), attached in one line, one micro-batch a second until killed. Job (c) reads the
topics TOPIC matches (`subscribePattern`), the others TOPIC itself.

    python -m tests.kafka.user_job_main BOOTSTRAP TOPIC CHECKPOINT SINK LEDGER JOB DATA_DIR [a|b|c]
        [--session] [--group GROUP --commit-to SERVERS [--commit-timeout S]] [--to-end] [--log FILE]
        [--iceberg-warehouse DIR] [--also KIND TOPIC CHECKPOINT SINK LEDGER]...

--session audits through `attach_session` (the query attached at its first progress report)
instead of `attach` right after `start()`; --group commits each batch to GROUP through the
brokers SERVERS; --to-end reads what the topic holds and ends (availableNow), the audit closed by
its `with` block; --log is the application configuring Python logging (every record of level INFO
and up, as `name|level|message` lines in FILE); without it the application configures none;
--iceberg-warehouse gives the session the Hadoop catalog `lake` at DIR (job (i) writes SINK in it);
--also runs one more job in the same driver (attached with `attach`, under the job name JOB, to its
own ledger), so that one kill crashes several jobs for the price of one driver's start.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

from app import audit
from app.config import SparkConfig
from app.runtime import jvm
from app.runtime.spark import build_spark_session
from tests.kafka.user_jobs import kafka, start_job
from tests.support.config import build_config

LOG_FORMAT = "%(name)s|%(levelname)s|%(message)s"


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="user_job_main")
    for name in ("bootstrap", "topic", "checkpoint", "sink", "ledger", "job", "data_dir"):
        parser.add_argument(name)
    parser.add_argument("kind", nargs="?", default="a", choices=("a", "b", "c", "i"))
    parser.add_argument("--session", action="store_true")
    parser.add_argument("--group")
    parser.add_argument("--commit-to")
    parser.add_argument("--commit-timeout", type=float)
    parser.add_argument("--to-end", action="store_true")
    parser.add_argument("--log")
    parser.add_argument("--iceberg-warehouse")
    parser.add_argument("--also", nargs=5, action="append", default=[], metavar="JOB_ARG")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.log:
        logging.basicConfig(filename=args.log, level=logging.INFO, format=LOG_FORMAT)
    catalog = []
    if args.iceberg_warehouse:
        catalog = [
            "iceberg.catalogs.lake.type=hadoop",
            f"iceberg.catalogs.lake.warehouse={args.iceberg_warehouse}",
        ]
    cfg = build_config(*catalog, data_dir=args.data_dir)
    spark_cfg = SparkConfig(
        **{
            **cfg.spark.__dict__,
            "mode": "local",
            "master": "local[2]",
            "driver_memory": "1g",
            "shuffle_partitions": 2,
        }
    )
    warehouse = str(Path(args.data_dir) / "warehouse")
    jars = jvm.spark_extra_jars(cfg.paths.cache_dir)
    spark = build_spark_session(spark_cfg, jars, warehouse, environ={}, iceberg=cfg.iceberg)
    commits: dict[str, Any] = {}
    if args.group:
        commits = {"group_id": args.group, "kafka_options": {"bootstrap.servers": args.commit_to}}
        if args.commit_timeout is not None:
            commits["commit_timeout_s"] = args.commit_timeout
    trigger = {"availableNow": True} if args.to_end else {"processingTime": "1 second"}
    raw = kafka(spark, args.bootstrap, "subscribePattern" if args.kind == "c" else "subscribe", args.topic)
    if args.session:
        group = args.group
        session_commits = {**commits, "group_id": lambda _query: group} if group else {}
        with audit.attach_session(
            spark, ledger=args.ledger, job_name=lambda _query: args.job, **session_commits
        ):
            query = start_job(args.kind, raw, args.checkpoint, args.sink, trigger)
            query.awaitTermination()
        return 0
    query = start_job(args.kind, raw, args.checkpoint, args.sink, trigger)
    with contextlib.ExitStack() as attached:
        attached.enter_context(audit.attach(query, job_name=args.job, ledger=args.ledger, **commits))
        for kind, topic, checkpoint, sink, ledger in args.also:
            source = kafka(spark, args.bootstrap, "subscribePattern" if kind == "c" else "subscribe", topic)
            more = start_job(kind, source, checkpoint, sink, trigger)
            attached.enter_context(audit.attach(more, job_name=args.job, ledger=ledger))
        spark.streams.awaitAnyTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
