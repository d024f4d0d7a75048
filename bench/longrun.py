"""Benchmark of a long life: one job's tables after days of micro-batches, and the nightly over them.

    .venv/bin/python -m bench.longrun [--days 1,7,30] [--batches-per-day 200] [--repeat 3] [--work-dir DIR]
    .venv/bin/python -m bench.longrun --days 1,2,3 --batches-per-day 50 --repeat 1  # a smoke run, minutes

One job with a 2-second trigger reads 10 partitions (`--partitions`) for D days, D the last of
--days; after each of those days (the measured days) the nightly runs in a fresh process, as a
scheduler starts it, and the bench reports every table's files, log entries and bytes and the
nightly's time by step. The first and the last measured day carry the same new data, so the ratio
last/first of the nightly is what history alone costs.

A real job makes 43,200 micro-batches a day; the bench makes --batches-per-day of them, the same on
every simulated day, so every count below scales by 43,200 / --batches-per-day. Each micro-batch
(the bench.nightly job, with 10 records per partition and batch) is
  - one group commit of all partitions to a private broker, for real (confluent-kafka): genuine
    `__consumer_offsets` records, one per partition, which the nightly's ingest reads;
  - one ledger commit of its 4 events per partition (CHECKPOINT_SNAPSHOT, CHECKPOINT_COMPLETED,
    COMMIT_REQUESTED, COMMIT_SUCCEEDED): one data file in the ledger's event_date partition and
    one log entry;
  - one sink commit of its rows: one data file and one log entry.
A measured day writes them through the job's own paths: the ledger's micro-batch append
(app.stream.ledger.LedgerWriter.write, delta-rs, one transaction id per batch, whose post-commit
hook leaves a log checkpoint every 100 commits), and a delta-rs append to the sink (the job's
sink is a Spark append, which may write up to one file per Kafka partition and batch: the sink
here has as many commits but fewer files than a Spark-written one).
The days between measured days (the bulk history) are the same batches, committed to the broker
for real, but the ledger's and the sink's data and commit files are written directly (pyarrow
Parquet and Delta JSON commits with add actions and statistics, the layout delta-rs writes): the
same file and log-entry counts, several times faster. One log checkpoint per table ends each bulk
day (delta-rs writers leave one every 100 commits, Spark's every 10): fewer checkpoint files than
a real table holds, the same replay for a reader (the last checkpoint and the commits after it).
After the bulk history a catch-up nightly (not measured) audits it, so the measured night sees one
new day, as every real night does; --nightly-every-day runs it after every bulk day instead, so
the audit tables also get one night's commits per day (slower). A first, unmeasured night right
after the job's start creates the audit tables, so day 1's night is not the one that creates them.

Days are simulated days (the default): day d is the d-th whole UTC day from an origin D + 1 days
before today; its batches' events are stamped at their moment of that day (so each day is its own
event_date partition of the ledger, closed once the next day is over), and the nightly after day
d runs with `nightly --now` at 02:30 the next morning, its window, closed days and retention
counted from there. The broker stamps a real group commit with the real time, so on simulated
days the group commits are generated instead: the `__consumer_offsets` records ingest would have
decoded (one per partition and batch, stamped 2 ms after the batch's commit request) are appended
to group_commits in one commit a day, as one ingest run a night writes them; the nightly's
ingest step then reads no new records from the broker. The nightly ends with `maintain`, whose
time is reported as a step.
After the last measured day, --interleave K (default 3) pairs of nights run alternately over the
first and the last measured day's saved states (day 1, day 30, day 1, day 30, ...): the ratio of
each pair, and their median, is the figure to quote on a shared machine, where a load that comes
and goes during the bench would otherwise fall on one day's nights and not the other's.
--real-clock keeps the first version of this bench: every event and commit at the real time it
was written, real broker commits, so every day falls in today's event_date partition (nothing is
ever closed) and the window's event_date filter keeps every row (the before-figures of issue 27).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from app.contracts.tables import GROUP_COMMITS_SCHEMA
from app.offsets_topic.decoder import partition_for_group
from bench.nightly import (
    GROUP,
    JOB,
    OFFSETS_PARTITIONS,
    PER_CHECKPOINT,
    RUN,
    TABLES,
    TOPIC,
    Job,
    Timed,
    child,
    overrides,
    private_broker,
    steps_of,
)

PARTITIONS = 10
TRIGGER_S = 2
REAL_BATCHES_PER_DAY = 86_400 // TRIGGER_S
LEDGER_SCOPE = "bench-longrun"  # the streaming query of the ledger's transaction app id
NIGHT_HOUR = 2.5  # the simulated nightly runs at 02:30 UTC after its day
GROUP_COMMITS = to_arrow_schema(GROUP_COMMITS_SCHEMA)
# Generated `__consumer_offsets` positions start far above what the broker's own log holds.
GENERATED_LOG_OFFSET = 10_000_000
# Spark writes statistics of the first 32 columns; min/max only of types whose JSON form is plain.
STATS_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string)


# --- the bulk history: Delta commits written directly ----------------------------------------------


def file_stats(rows: pa.Table) -> str:
    """The add action's statistics, as delta-rs writes them (min/max of ints and strings only)."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    for name in rows.column_names:
        column = rows.column(name)
        if any(is_type(column.type) for is_type in STATS_TYPES) and column.null_count < len(column):
            low, high = pc.min_max(column).values()
            mins[name], maxs[name] = low.as_py(), high.as_py()
    nulls = {name: rows.column(name).null_count for name in rows.column_names}
    return json.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def partition_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)


class BulkAppender:
    """Appends to an existing Delta table by writing its Parquet data files and its JSON commit
    files directly, one commit per `append`: the layout of a delta-rs append, without delta-rs's
    per-commit work. The bench is the table's only writer while it appends."""

    def __init__(self, path: Path) -> None:
        from deltalake import DeltaTable

        table = DeltaTable(str(path))
        self.path = path
        self.version = table.version()
        self.partition_by = list(table.metadata().partition_columns)
        self.schema = pa.schema(table.schema().to_arrow())

    def append(self, rows: pa.Table) -> None:
        now_ms = int(time.time() * 1000)
        adds = [self._write_file(part, values, now_ms) for values, part in self._split(rows)]
        info = {
            "timestamp": now_ms,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "engineInfo": "bench.longrun",
        }
        lines = [{"commitInfo": info}, *({"add": a} for a in adds)]
        self.version += 1
        # "x": a commit file is never overwritten, as a Delta writer's put-if-absent guarantees.
        with (self.path / "_delta_log" / f"{self.version:020d}.json").open("x") as out:
            out.write("\n".join(json.dumps(line) for line in lines) + "\n")

    def checkpoint(self) -> None:
        from deltalake import DeltaTable

        DeltaTable(str(self.path)).create_checkpoint()

    def _split(self, rows: pa.Table) -> list[tuple[dict[str, str], pa.Table]]:
        rows = rows.cast(self.schema)
        if not self.partition_by:
            return [({}, rows)]
        (column,) = self.partition_by  # the ledger's event_date: the only partitioned table written
        parts = []
        for value in pc.unique(rows.column(column)).to_pylist():
            part = rows.filter(
                pc.equal(rows.column(column), pa.scalar(value, rows.schema.field(column).type))
            )
            parts.append(({column: partition_text(value)}, part.drop_columns([column])))
        return parts

    def _write_file(self, rows: pa.Table, values: dict[str, str], now_ms: int) -> dict[str, Any]:
        folder = "".join(f"{k}={v}/" for k, v in values.items())
        relative = f"{folder}part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, target, compression="snappy")
        return {
            "path": relative,
            "partitionValues": values,
            "size": target.stat().st_size,
            "modificationTime": now_ms,
            "dataChange": True,
            "stats": file_stats(rows),
        }


# --- the simulated job -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clock:
    """When the job's simulated days happen. Simulated (``origin`` set): day d is the d-th whole UTC
    day from ``origin`` and its batches are spread over it; the nightly after day d runs at
    NIGHT_HOUR the next morning (`nightly --now`). Real (``origin`` None): every event at the time it
    is written, as before simulated days existed."""

    origin: datetime | None

    def batch_time(self, day: int, batch: int, batches: int) -> datetime:
        assert self.origin is not None
        return self.origin + timedelta(days=day - 1, seconds=(batch + 0.5) * 86_400 / batches)

    def night(self, day: int) -> datetime | None:
        """The nightly's clock after ``day`` (day 0: the job's start); None: the real clock."""
        return None if self.origin is None else self.origin + timedelta(days=day, hours=NIGHT_HOUR)


@dataclass
class Life:
    """The job over its days: each day `batches` micro-batches, each a group commit, a ledger
    commit and a sink commit (the module's docstring says through which writers)."""

    job: Job
    batches: int
    clock: Clock

    def __post_init__(self) -> None:
        from app.stream.ledger import LedgerWriter

        # Local tables need no storage settings: the job's ledger writer, without a Spark session.
        self.writer = LedgerWriter(None, str(self.ledger), JOB, RUN, scope=LEDGER_SCOPE)
        self.log_offset = GENERATED_LOG_OFFSET

    @property
    def ledger(self) -> Path:
        return self.job.data / "tables" / "ledger"

    @property
    def sink(self) -> Path:
        return self.job.data / "tables" / "sink"

    @property
    def group_commits(self) -> Path:
        return self.job.data / "tables" / "group_commits"

    def start(self) -> None:
        """The ledger as the streaming job creates it, the sink, then the run's RUN_STARTED."""
        from app.storage.handles import open_handle

        self.writer.ensure()
        self.job.start(self.clock.origin)
        if self.clock.origin is not None:
            open_handle("group_commits", str(self.group_commits), None).ensure()

    def real_day(self, day: int) -> None:
        from deltalake import write_deltalake

        def write_batch(cp: int, at: datetime) -> None:
            self.writer.write(self.job.checkpoint_events(cp, at), cp)
            write_deltalake(str(self.sink), self.job.sink_rows(cp, cp + 1), mode="append")

        self._commit(day, write_batch)

    def bulk_day(self, day: int) -> None:
        ledger, sink = BulkAppender(self.ledger), BulkAppender(self.sink)

        def write_batch(cp: int, at: datetime) -> None:
            events = self.job.checkpoint_events(cp, at)
            ledger.append(pa.Table.from_pylist([e.to_row() for e in events], schema=ledger.schema))
            sink.append(self.job.sink_rows(cp, cp + 1))

        self._commit(day, write_batch)
        ledger.checkpoint()
        sink.checkpoint()

    def _commit(self, day: int, write_batch: Callable[[int, datetime], None]) -> None:
        """The day's group commits and each batch's writes: real commits to the broker on the real
        clock; on simulated days the `__consumer_offsets` records ingest would have decoded, stamped
        with the day's times, appended to group_commits in one commit (one ingest run a day)."""
        if self.clock.origin is None:
            self.job.commit(self.batches, write_batch)
            return
        from deltalake import write_deltalake

        first = self.job.checkpoint + 1
        rows = []
        for batch in range(self.batches):
            cp, at = first + batch, self.clock.batch_time(day, batch, self.batches)
            write_batch(cp, at)
            rows += self._commit_rows(cp, at + timedelta(milliseconds=2), day)
        self.job.checkpoint = first + self.batches - 1
        write_deltalake(
            str(self.group_commits), pa.Table.from_pylist(rows, schema=GROUP_COMMITS), mode="append"
        )

    def _commit_rows(self, cp: int, at: datetime, day: int) -> list[dict[str, Any]]:
        rows = []
        for p in range(self.job.partitions):
            rows.append(
                {
                    "group_id": GROUP,
                    "topic": TOPIC,
                    "partition": p,
                    "committed_offset": cp * PER_CHECKPOINT,
                    "metadata": "",
                    "commit_time": at,
                    "record_kind": "commit",
                    "value_version": 3,
                    "transactional": False,
                    "log_partition": partition_for_group(GROUP, OFFSETS_PARTITIONS),
                    "log_offset": self.log_offset,
                    "log_time": at,
                    "ingest_run_id": f"bench-longrun-day-{day}",
                }
            )
            self.log_offset += 1
        return rows


# --- measurements ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableShape:
    table: str
    live_files: int  # data files of the current version
    data_files: int  # data files on disk (removed ones stay until VACUUM)
    log_json: int  # _delta_log commit files
    checkpoints: int  # _delta_log checkpoint Parquet files
    bytes: int  # everything under the table's directory


def table_shape(name: str, path: Path) -> TableShape | None:
    from deltalake import DeltaTable

    if not (path / "_delta_log").is_dir():
        return None
    files = [f for f in path.rglob("*") if f.is_file()]
    log = [f for f in files if f.parent.name == "_delta_log"]
    return TableShape(
        table=name,
        live_files=len(DeltaTable(str(path)).file_uris()),
        data_files=sum(1 for f in files if f.suffix == ".parquet" and f.parent.name != "_delta_log"),
        log_json=sum(1 for f in log if f.name.endswith(".json") and f.name[:20].isdigit()),
        checkpoints=sum(1 for f in log if ".checkpoint" in f.name and f.suffix == ".parquet"),
        bytes=sum(f.stat().st_size for f in files),
    )


@dataclass(frozen=True)
class DayFigures:
    day: int
    write_s: float  # the day's batches through the job's writers
    catch_up_s: float  # catch-up nightlies over the bulk history before it (0: none)
    bulk_days: int  # days of bulk history written since the previous measured day
    bulk_s: float
    nightly_s: float  # median of the runs
    nightly_runs_s: list[float]
    steps: dict[str, float]  # median of each step
    tables: list[TableShape]


def shapes(data: Path) -> list[TableShape]:
    found = (table_shape(name, data / "tables" / name) for name in TABLES)
    return [s for s in found if s is not None]


# --- report ------------------------------------------------------------------------------------------


def print_day(f: DayFigures) -> None:
    print(
        f"day {f.day}: bulk history {f.bulk_days} day(s) in {f.bulk_s:.0f}s, catch-up nightly "
        f"{f.catch_up_s:.0f}s; the day's batches in {f.write_s:.0f}s; nightly {f.nightly_s:.1f}s "
        f"(median of {', '.join(f'{s:.1f}' for s in f.nightly_runs_s)})",
        flush=True,
    )
    print(
        f"  {'table':20s} {'live files':>10s} {'data files':>10s} {'log json':>9s} "
        f"{'checkpoints':>11s} {'MB':>9s}"
    )
    for t in f.tables:
        print(
            f"  {t.table:20s} {t.live_files:10,d} {t.data_files:10,d} {t.log_json:9,d} "
            f"{t.checkpoints:11,d} {t.bytes / 1e6:9.2f}"
        )
    print(
        "  nightly by step (medians): " + ", ".join(f"{k} {v:.1f}s" for k, v in f.steps.items()), flush=True
    )


def print_summary(days: Sequence[DayFigures], args: argparse.Namespace) -> None:
    first, last = days[0], days[-1]
    b = args.batches_per_day
    print()
    print(
        f"input: 1 job, {args.partitions} partitions, {TRIGGER_S}s trigger; {b:,} micro-batches a day "
        f"(a real day has {REAL_BATCHES_PER_DAY:,}: 1/{REAL_BATCHES_PER_DAY / b:,.0f} of it), each "
        f"{args.partitions} offset commit records, {4 * args.partitions} ledger rows, "
        f"{PER_CHECKPOINT * args.partitions} sink rows; a day: {b * args.partitions:,} commit records, "
        f"{4 * b * args.partitions:,} ledger rows, {PER_CHECKPOINT * b * args.partitions:,} sink rows; "
        f"days {','.join(str(d.day) for d in days)} measured ({args.repeat} nightly runs each), "
        "the others bulk history" + ("; nightly after every day" if args.nightly_every_day else "")
    )
    steps = list(first.steps)
    print(f"  {'nightly':24s}" + "".join(f"{'day ' + str(d.day):>10s}" for d in days) + f"{'ratio':>9s}")
    rows = [("total", [d.nightly_s for d in days])] + [
        (s, [d.steps.get(s, 0.0) for d in days]) for s in steps
    ]
    for label, values in rows:
        ratio = f"{values[-1] / values[0]:8.2f}x" if values[0] > 0 else f"{'-':>9s}"
        print(f"  {label:24s}" + "".join(f"{v:9.1f}s" for v in values) + ratio)
    for name in ("ledger", "sink", "group_commits"):
        a = next((t for t in first.tables if t.table == name), None)
        z = next((t for t in last.tables if t.table == name), None)
        if a and z:
            print(
                f"  {name}: day {first.day} {a.data_files:,} files / {a.log_json:,} log entries / "
                f"{a.bytes / 1e6:.1f} MB -> day {last.day} {z.data_files:,} / {z.log_json:,} / "
                f"{z.bytes / 1e6:.1f} MB"
            )
    print(
        f"ratio nightly day {last.day} / day {first.day}: {last.nightly_s / first.nightly_s:.2f}x "
        "(the issue's target after maintenance: at most 1.2x)"
    )
    for d in days:
        if "maintain" in d.steps:
            print(
                f"  maintain day {d.day}: {d.steps['maintain']:.1f}s of {d.nightly_s:.1f}s, "
                f"{100 * d.steps['maintain'] / d.nightly_s:.0f}% of the nightly (target: at most 20%)"
            )
    ledger = next((t for t in last.tables if t.table == "ledger"), None)
    if ledger is not None:
        print(
            f"  ledger after day {last.day}: {ledger.live_files:,d} live files over {last.day} day(s) "
            f"({ledger.live_files / last.day:.1f} a day), {ledger.log_json:,d} log entries, "
            f"{ledger.checkpoints:,d} checkpoints"
        )


# --- run ---------------------------------------------------------------------------------------------


def measured_days(text: str) -> list[int]:
    try:
        days = sorted({int(d) for d in text.split(",") if d.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--days: whole numbers separated by commas, got {text!r}") from exc
    if not days or days[0] < 1:
        raise argparse.ArgumentTypeError(f"--days: days count from 1, got {text!r}")
    return days


def nightly(work: Path, bootstrap: str, run_id: str, now: datetime | None) -> Timed:
    """`offset-audit nightly` in a fresh process, at ``now`` (None: the real clock)."""
    sets = [a for o in overrides(work, bootstrap) for a in ("--set", o)]
    clock = [] if now is None else ["--now", now.isoformat()]
    return child(
        ["-m", "app.cli", "nightly", "--json", "--run-id", run_id, "--fail-on", "critical", *clock, *sets],
        work / "nightly.log",
    )


def catch_up(work: Path, bootstrap: str, day: int, clock: Clock) -> float:
    """An unmeasured nightly after `day`: over the bulk history, so the measured one sees one new
    day (after day 0, the job's start: the first night)."""
    night = nightly(work, bootstrap, f"longrun-catch-up-{day}", clock.night(day))
    steps_of(night)  # raises when a step failed
    return night.wall_s


def measure_night(
    work: Path, bootstrap: str, day: int, repeat: int, clock: Clock, keep: Path | None = None
) -> list[Timed]:
    """The day's nightly `repeat` times over the same state: the data directory is copied before
    the first run and put back before each later one (the broker is only read). The last run's
    tables stay, and the simulated job goes on from them. ``keep``: a copy of the state before the
    night is left there (for `interleaved`)."""
    data, saved = work / "data", work / "before-night"
    if repeat > 1 or keep is not None:
        shutil.copytree(data, saved)
    nights = []
    for i in range(repeat):
        if i:
            restore(saved, data)
        nights.append(nightly(work, bootstrap, f"longrun-day-{day}", clock.night(day)))
    if keep is not None:
        saved.rename(keep)
    shutil.rmtree(saved, ignore_errors=True)
    return nights


def restore(saved: Path, data: Path) -> None:
    shutil.rmtree(data)
    shutil.copytree(saved, data)


@dataclass(frozen=True)
class Interleaved:
    """The first and the last measured day's nights run alternately at the end, each over its day's
    saved state: a load that changes during the bench (a shared machine) then weighs on both
    alike, which the sequential figures (day 1 measured minutes before day 30) cannot promise."""

    first_day: int
    last_day: int
    first_s: list[float]
    last_s: list[float]
    ratios: list[float]  # last / first of each pair
    first_steps: dict[str, float]  # median of each step over the first day's nights
    last_steps: dict[str, float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)


def interleaved(
    work: Path, bootstrap: str, states: Mapping[int, Path], rounds: int, clock: Clock
) -> Interleaved:
    """``rounds`` pairs of nights, the first measured day's then the last's, each over a fresh copy
    of that day's saved state (``states``); the data directory is left as the last day's night."""
    first, last = min(states), max(states)
    data = work / "data"
    times: dict[int, list[float]] = {first: [], last: []}
    steps: dict[int, list[dict[str, float]]] = {first: [], last: []}
    for _ in range(rounds):
        for day in (first, last):
            restore(states[day], data)
            night = nightly(work, bootstrap, f"longrun-day-{day}", clock.night(day))
            steps[day].append(steps_of(night))  # raises when a step failed
            times[day].append(round(night.wall_s, 2))
    ratios = [round(b / a, 3) for a, b in zip(times[first], times[last], strict=True)]

    def medians(day: int) -> dict[str, float]:
        return {k: round(statistics.median(s[k] for s in steps[day]), 2) for k in steps[day][0]}

    return Interleaved(first, last, times[first], times[last], ratios, medians(first), medians(last))


def print_interleaved(result: Interleaved) -> None:
    a, z = result.first_day, result.last_day
    print(
        f"interleaved: nightly day {a} {statistics.median(result.first_s):.1f}s "
        f"(runs {', '.join(f'{v:.1f}' for v in result.first_s)}), day {z} "
        f"{statistics.median(result.last_s):.1f}s (runs {', '.join(f'{v:.1f}' for v in result.last_s)}); "
        f"ratio day {z} / day {a} per pair {', '.join(f'{r:.2f}' for r in result.ratios)}, "
        f"median {result.ratio:.2f}x (target: at most 1.2x)"
    )
    for step, a_s in result.first_steps.items():
        z_s = result.last_steps.get(step, 0.0)
        ratio = f"{z_s / a_s:.2f}x" if a_s > 0 else "-"
        print(f"  {step:24s} day {a}: {a_s:6.2f}s  day {z}: {z_s:6.2f}s  {ratio}")


def run(args: argparse.Namespace, work: Path) -> tuple[list[DayFigures], Interleaved | None]:
    figures: list[DayFigures] = []
    states: dict[int, Path] = {}
    pairs = None
    broker, bootstrap = private_broker(work, args.partitions)
    try:
        origin = None
        if not args.real_clock:  # the last simulated night falls before the real clock
            today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            origin = today - timedelta(days=args.days[-1] + 1)
        clock = Clock(origin)
        job = Job(bootstrap, work / "data", partitions=args.partitions)
        life = Life(job, args.batches_per_day, clock)
        life.start()
        # The first night creates the audit tables and warms the disk cache: unmeasured, so that
        # day 1's night is a night like any later one (as bench.nightly's seed night).
        catch_up(work, bootstrap, 0, clock)
        previous = 0
        for day in args.days:
            bulk_s = catch_up_s = 0.0
            for bulk_day in range(previous + 1, day):
                t0 = time.perf_counter()
                life.bulk_day(bulk_day)
                bulk_s += time.perf_counter() - t0
                if args.nightly_every_day:
                    catch_up_s += catch_up(work, bootstrap, bulk_day, clock)
            if day - previous > 1 and not args.nightly_every_day:
                catch_up_s = catch_up(work, bootstrap, day - 1, clock)
            t0 = time.perf_counter()
            life.real_day(day)
            write_s = time.perf_counter() - t0
            ends = args.interleave and len(args.days) > 1 and day in (args.days[0], args.days[-1])
            keep = work / f"state-day-{day}" if ends else None
            nights = measure_night(work, bootstrap, day, args.repeat, clock, keep)
            if keep is not None:
                states[day] = keep
            steps = [steps_of(n) for n in nights]
            figures.append(
                DayFigures(
                    day=day,
                    write_s=round(write_s, 1),
                    catch_up_s=round(catch_up_s, 1),
                    bulk_days=day - previous - 1,
                    bulk_s=round(bulk_s, 1),
                    nightly_s=round(statistics.median(n.wall_s for n in nights), 2),
                    nightly_runs_s=[round(n.wall_s, 2) for n in nights],
                    steps={k: round(statistics.median(s[k] for s in steps), 2) for k in steps[0]},
                    tables=shapes(work / "data"),
                )
            )
            print_day(figures[-1])
            previous = day
        if len(states) == 2:
            pairs = interleaved(work, bootstrap, states, args.interleave, clock)
    finally:
        broker.stop()
    return figures, pairs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=measured_days, default=[1, 7, 30], help="measured days; the last is D")
    ap.add_argument("--batches-per-day", type=int, default=200, help="micro-batches per simulated day")
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument(
        "--repeat", type=int, default=3, help="nightly runs per measured day over the same state (median)"
    )
    ap.add_argument(
        "--interleave",
        type=int,
        default=3,
        help="pairs of nights (first, last measured day) run alternately at the end (0: none)",
    )
    ap.add_argument("--nightly-every-day", action="store_true", help="a nightly after every bulk day too")
    ap.add_argument(
        "--real-clock",
        action="store_true",
        help="every event at the real time and real broker commits (all days in today's partition)",
    )
    ap.add_argument("--work-dir", type=Path, default=None, help="default: a new temporary directory")
    args = ap.parse_args(argv)
    if min(args.batches_per_day, args.partitions, args.repeat) < 1:
        ap.error("--batches-per-day, --partitions and --repeat must be at least 1")
    if args.interleave < 0:
        ap.error("--interleave must be 0 (none) or more")
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="bench-longrun-"))).resolve()
    if (work / "data").exists():
        ap.error(f"--work-dir {work} holds an earlier run's data; give a new or empty directory")
    work.mkdir(parents=True, exist_ok=True)
    print(f"work directory: {work}", flush=True)
    started = time.perf_counter()
    figures, pairs = run(args, work)
    print_summary(figures, args)
    if pairs is not None:
        print_interleaved(pairs)
    print(
        f"bench wall time {time.perf_counter() - started:.0f}s; median nightly "
        f"{statistics.median(f.nightly_s for f in figures):.1f}s"
    )
    report: dict[str, Any] = {"days": [asdict(f) for f in figures]}
    if pairs is not None:
        report["interleaved"] = {**asdict(pairs), "ratio": pairs.ratio}
    (work / "longrun.json").write_text(json.dumps(report, indent=2))
    print(f"figures: {work / 'longrun.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
