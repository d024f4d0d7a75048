"""spark-submit entry point: `spark-submit jobs/incidents.py [options]` runs `offset-audit incidents`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["incidents", *sys.argv[1:]]))
