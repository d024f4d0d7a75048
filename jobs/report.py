"""spark-submit entry point: `spark-submit jobs/report.py [options]` runs `offset-audit report`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["report", *sys.argv[1:]])
