"""spark-submit entry point: `spark-submit jobs/repair.py [options]` runs `offset-audit repair`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["repair", *sys.argv[1:]]))
