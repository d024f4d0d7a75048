"""spark-submit entry point: `spark-submit jobs/flink_watch.py [options]` runs
`offset-audit flink-watch`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["flink-watch", *sys.argv[1:]])
