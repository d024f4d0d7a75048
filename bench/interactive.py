"""Benchmark of the commands a person runs in an incident, against a Spark session start.

    .venv/bin/python -m bench.interactive [--data-dir data/demo] [--runs 5]

Over the tables under --data-dir (`make demo` leaves its own in data/demo), each command runs
--runs times as a fresh process, as a person's shell starts it: the top level's `--help`,
`config show`, `incidents`, the plan of the most severe open incident with steps
(`repair --incident ID`), `forensics --job J --at T` (that incident's job and its last evidence
time, or the job's last ledger event) and `report`. The baseline, measured the same way in the
same run, is a process that starts the local Spark session these commands used to start and
stops it: `ratio` is a command's median over the baseline's median. Each line names the exit code
of its runs (or says that they differ). Whole-process wall times from the parent's clock.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pyarrow.compute as pc

from app.config import load_config
from app.incidents.incident import StoredIncident
from app.incidents.io import read_incidents
from app.runtime.jvm import REPO_ROOT
from app.storage import delta_rows
from app.storage.handles import AuditTables

TABLES = ("ledger", "group_commits", "sink", "findings", "incidents", "restarts")
SPARK_START = (
    "import sys\n"
    "from app.config import load_config\n"
    "from app.runtime.session import spark_session\n"
    "spark_session(load_config('local', overrides=sys.argv[1:])).stop()\n"
)


def timed(argv: Sequence[str], runs: int) -> tuple[list[float], set[int]]:
    """Wall seconds of ``runs`` fresh processes of ``argv`` and their exit codes."""
    seconds, codes = [], set()
    for _ in range(runs):
        started = time.monotonic()
        done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, check=False)
        seconds.append(time.monotonic() - started)
        codes.add(done.returncode)
    return seconds, codes


def incident_of_interest(data_dir: Path) -> StoredIncident:
    cfg = load_config("local", overrides=[f"paths.data_dir={data_dir}"])
    incidents = read_incidents(AuditTables.from_config(cfg, cfg.storage).incidents)
    with_steps = [i for i in incidents if i.is_open and i.remedy.steps]
    if not with_steps:
        raise SystemExit(f"no open incident with a remedy under {data_dir}: run `make demo` first")
    return with_steps[0]  # most severe first


def last_event(data_dir: Path, job: str) -> datetime:
    ledger = AuditTables.from_config(
        load_config("local", overrides=[f"paths.data_dir={data_dir}"]), None
    ).locations.ledger
    dataset = delta_rows.dataset(None, ledger)
    if dataset is None:
        raise SystemExit(f"no ledger under {data_dir}")
    times = dataset.to_table(columns=["event_time"], filter=pc.field("job_name") == job).column("event_time")
    latest: datetime = pc.max(times).as_py()
    return latest


def table_sizes(data_dir: Path) -> dict[str, int]:
    tables = AuditTables.from_config(
        load_config("local", overrides=[f"paths.data_dir={data_dir}"]), None
    ).locations
    sizes = {}
    for name in TABLES:
        dataset = delta_rows.dataset(None, getattr(tables, name))
        sizes[name] = 0 if dataset is None else dataset.count_rows()
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO_ROOT / "data" / "demo")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    data_dir = args.data_dir.resolve()
    incident = incident_of_interest(data_dir)
    sizes = table_sizes(data_dir)
    print(f"tables under {data_dir}: " + ", ".join(f"{n} {c:,} rows" for n, c in sizes.items()))
    settings = ["--set", f"paths.data_dir={data_dir}"]
    cli = [sys.executable, "-m", "app.cli"]
    job = str(incident.job_name)
    at = (incident.last_evidence_at or last_event(data_dir, job)).isoformat()
    commands = {
        "--help": [*cli, "--help"],
        "config show": [*cli, "config", "show", *settings],
        "incidents": [*cli, "incidents", *settings],
        "repair --incident (plan)": [*cli, "repair", "--incident", incident.incident_id, *settings],
        "forensics --at": [*cli, "forensics", "--job", job, "--at", at, *settings],
        "report": [*cli, "report", "--output", str(data_dir / "bench-report.html"), *settings],
    }
    base, _ = timed([sys.executable, "-c", SPARK_START, f"paths.data_dir={data_dir}"], args.runs)
    floor = statistics.median(base)
    print(f"baseline, a local Spark session started and stopped: median {floor:.2f}s ({args.runs} runs)")
    for name, command in commands.items():
        seconds, codes = timed(command, args.runs)
        median = statistics.median(seconds)
        code = f"exit {codes.pop()}" if len(codes) == 1 else f"exit codes differ: {sorted(codes)}"
        runs = " ".join(f"{s:.2f}" for s in seconds)
        print(f"{name:<26} median {median:5.2f}s  ratio {median / floor:.2f}  ({code}; runs {runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
