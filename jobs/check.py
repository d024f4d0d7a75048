"""spark-submit entry point: `spark-submit jobs/check.py [options]` runs `offset-audit check`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["check", *sys.argv[1:]]))
