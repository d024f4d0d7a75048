"""spark-submit entry point: `spark-submit jobs/check.py [options]` runs `offset-audit check`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["check", *sys.argv[1:]])
