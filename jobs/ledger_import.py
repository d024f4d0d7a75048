"""spark-submit entry point: `spark-submit jobs/ledger_import.py [options]` runs
`offset-audit ledger-import`."""

import sys

from app.cli import run_and_exit

if __name__ == "__main__":
    run_and_exit(["ledger-import", *sys.argv[1:]])
