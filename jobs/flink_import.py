"""spark-submit entry point: `spark-submit jobs/flink_import.py [options]` runs
`offset-audit flink-import`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["flink-import", *sys.argv[1:]])
