"""spark-submit entry point: `spark-submit jobs/forensics.py [options]` runs `offset-audit forensics`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["forensics", *sys.argv[1:]])
