"""spark-submit entry point: `spark-submit jobs/reconcile.py [options]` runs `offset-audit reconcile`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["reconcile", *sys.argv[1:]]))
