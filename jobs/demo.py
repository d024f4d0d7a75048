"""spark-submit entry point: `spark-submit jobs/demo.py [options]` runs `offset-audit demo`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
