"""spark-submit entry point: `spark-submit jobs/reconcile.py [options]` runs `offset-audit reconcile`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["reconcile", *sys.argv[1:]])
