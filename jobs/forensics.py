"""spark-submit entry point: `spark-submit jobs/forensics.py [options]` runs `offset-audit forensics`."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["forensics", *sys.argv[1:]]))
