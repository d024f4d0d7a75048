"""spark-submit entry point: `spark-submit jobs/incidents.py [options]` runs `offset-audit incidents`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["incidents", *sys.argv[1:]])
