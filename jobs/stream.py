"""spark-submit entry point: `spark-submit jobs/stream.py [options]` runs `offset-audit stream`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["stream", *sys.argv[1:]])
