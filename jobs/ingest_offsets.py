"""spark-submit entry point for `offset-audit ingest-offsets` (options pass through)."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest-offsets", *sys.argv[1:]]))
