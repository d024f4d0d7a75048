"""spark-submit entry point: `spark-submit jobs/demo.py [options]` runs `offset-audit demo`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["demo", *sys.argv[1:]])
