"""spark-submit entry point: `spark-submit jobs/nightly.py [options]` runs `offset-audit nightly`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["nightly", *sys.argv[1:]]))
