"""spark-submit entry point: `spark-submit jobs/repair.py [options]` runs `offset-audit repair`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["repair", *sys.argv[1:]])
