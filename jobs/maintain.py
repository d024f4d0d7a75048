"""spark-submit entry point: `spark-submit jobs/maintain.py [options]` runs `offset-audit maintain`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["maintain", *sys.argv[1:]])
