"""spark-submit entry point: `spark-submit jobs/nightly.py [options]` runs `offset-audit nightly`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["nightly", *sys.argv[1:]])
