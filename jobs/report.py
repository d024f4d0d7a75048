"""spark-submit entry point: `spark-submit jobs/report.py [options]` runs `offset-audit report`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", *sys.argv[1:]]))
