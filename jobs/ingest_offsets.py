"""spark-submit entry point for `offset-audit ingest-offsets` (options pass through)."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["ingest-offsets", *sys.argv[1:]])
