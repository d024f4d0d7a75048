"""spark-submit entry point: `spark-submit jobs/stream.py [options]` runs `offset-audit stream`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["stream", *sys.argv[1:]]))
