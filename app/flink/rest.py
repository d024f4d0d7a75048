"""A small client of a Flink JobManager's REST API, and the documents it reads as plain records.

Only what the sidecar needs: `/jobs/overview` (find a job by name), `/jobs/:id` (its state and start),
`/jobs/:id/checkpoints` (`counts`, `latest.restored`, `history`), `/jobs/:id/checkpoints/config`
(externalized retention), the JobManager's configuration (`execution.checkpointing.num-retained`),
the parameters a job published (`/jobs/:id/config`: its startup mode, when it names it there) and a
vertex's metrics. Every request goes through one ``Pacer``: the JobManager serves the job's
own web UI and clients too, so the sidecar never sends more than ``max_per_s`` requests a second.

The parsing functions are pure (tests feed them recorded documents); the field names are Flink's
(`CheckpointingStatistics`, `CompletedCheckpointStatistics`, `RestoredCheckpointStatistics`,
`CheckpointConfigInfo`, `JobDetailsInfo`), the same in Flink 1.20 and 2.2.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.errors import FlinkRestError, UsageError

# Flink's words in its REST documents (JobStatus, CheckpointStatsStatus): not the ledger's vocabulary.
STATUS_COMPLETED: Final = "COMPLETED"
STATUS_FAILED: Final = "FAILED"
# A job in one of these states will never run again under its id (JobStatus.isGloballyTerminalState).
TERMINAL_STATES: Final = frozenset({"FINISHED", "CANCELED", "FAILED"})
STATE_RUNNING: Final = "RUNNING"
# The option that says how many completed checkpoints Flink keeps, under its 1.20+ and older keys.
NUM_RETAINED_KEYS: Final = ("execution.checkpointing.num-retained", "state.checkpoints.num-retained")
NUM_RETAINED_DEFAULT: Final = 1
# Where the job's checkpoints go (`<dir>/<job id>/chk-N`), under its 1.20+ and older keys.
CHECKPOINT_DIR_KEYS: Final = ("execution.checkpointing.dir", "state.checkpoints.dir")

# The Kafka sources' commit counters, per subtask, under the operator's metric prefix
# (`Source__kafka-source.KafkaSourceReader.commitsFailed` for a KafkaSource named kafka-source; the
# legacy consumer's `KafkaConsumer` group has the same names).
COMMITS_FAILED: Final = "commitsFailed"
COMMITS_SUCCEEDED: Final = "commitsSucceeded"
COMMIT_METRIC_GROUPS: Final = ("KafkaSourceReader", "KafkaConsumer")

DEFAULT_TIMEOUT_S: Final = 5.0
DEFAULT_MAX_PER_S: Final = 2.0

Opener = Callable[[str, float], bytes]


class Pacer:
    """At most ``max_per_s`` calls of ``wait`` return per second: each waits until ``1/max_per_s``
    after the previous one returned. The clock and the sleep are injected (tests use a fake clock)."""

    def __init__(
        self,
        max_per_s: float = DEFAULT_MAX_PER_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_per_s <= 0:
            raise UsageError(f"a request rate must be positive, got {max_per_s}")
        self.spacing = 1.0 / max_per_s
        self.clock = clock
        self.sleep = sleep
        self._next: float | None = None

    def wait(self) -> None:
        now = self.clock()
        if self._next is not None and now < self._next:
            self.sleep(self._next - now)
            now = self.clock()
        self._next = max(now, self._next or now) + self.spacing


@dataclass(frozen=True)
class JobSummary:
    """One job as `/jobs/overview` or `/jobs/:id` lists it."""

    job_id: str
    name: str
    state: str
    start_ms: int
    end_ms: int | None  # None while it runs (Flink says -1)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def running(self) -> bool:
        return self.state == STATE_RUNNING


@dataclass(frozen=True)
class CheckpointStat:
    """One checkpoint or savepoint of the REST history (`history[]`, `latest.completed`)."""

    checkpoint_id: int
    status: str
    is_savepoint: bool
    trigger_ms: int
    ack_ms: int | None
    external_path: str | None
    discarded: bool

    @property
    def completed(self) -> bool:
        return self.status == STATUS_COMPLETED

    @property
    def failed(self) -> bool:
        return self.status == STATUS_FAILED


@dataclass(frozen=True)
class Restore:
    """`latest.restored`: the checkpoint or savepoint the job's current attempt started from."""

    checkpoint_id: int
    restore_ms: int
    is_savepoint: bool
    external_path: str | None


@dataclass(frozen=True)
class Checkpoints:
    """`/jobs/:id/checkpoints`: the history Flink still holds (its last `web.checkpoints.history`,
    10 by default), ascending by id, the restore of the current attempt, and the counts."""

    history: tuple[CheckpointStat, ...]
    restored: Restore | None
    completed_count: int
    failed_count: int


@dataclass(frozen=True)
class CheckpointConfig:
    """`/jobs/:id/checkpoints/config` and the retention option: what decides whether a sidecar can
    read every checkpoint before Flink deletes it."""

    interval_ms: int | None
    externalized: bool
    delete_on_cancellation: bool
    num_retained: int | None  # None: the JobManager's configuration does not say (Flink's default 1)
    directory: str | None = None  # the checkpoint root, when the configuration says it


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _require(doc: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise FlinkRestError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def parse_job(doc: Any) -> JobSummary:
    """A job of `/jobs/overview` (`jid`) or `/jobs/:id` (`jid` too)."""
    job = _require(doc, "job")
    job_id, name, state = job.get("jid"), job.get("name"), job.get("state")
    start = _int(job.get("start-time"))
    if not isinstance(job_id, str) or not isinstance(state, str) or start is None:
        raise FlinkRestError(f"a job without jid, state or start-time: {json.dumps(job)[:200]}")
    return JobSummary(job_id, str(name or ""), state, start, _int(job.get("end-time")))


def parse_overview(doc: Any) -> list[JobSummary]:
    jobs = _require(doc, "/jobs/overview").get("jobs")
    if not isinstance(jobs, list):
        raise FlinkRestError("/jobs/overview: no jobs list")
    return [parse_job(j) for j in jobs]


def parse_stat(doc: Any) -> CheckpointStat:
    entry = _require(doc, "checkpoint statistics")
    checkpoint_id, trigger = _int(entry.get("id")), _int(entry.get("trigger_timestamp"))
    if checkpoint_id is None or trigger is None or not isinstance(entry.get("status"), str):
        raise FlinkRestError(
            f"a checkpoint without id, status or trigger_timestamp: {json.dumps(entry)[:200]}"
        )
    path = entry.get("external_path")
    # Flink's placeholder for "not externalized" (a checkpoint kept in the JobManager's memory).
    external = (
        path if isinstance(path, str) and path and path != "<checkpoint-not-externally-addressable>" else None
    )
    ack = _int(entry.get("latest_ack_timestamp"))
    return CheckpointStat(
        checkpoint_id=checkpoint_id,
        status=str(entry["status"]),
        is_savepoint=bool(entry.get("is_savepoint", False)),
        trigger_ms=trigger,
        ack_ms=ack if ack else None,  # 0 or -1 before the first acknowledgement
        external_path=external,
        discarded=bool(entry.get("discarded", False)),
    )


def parse_restore(doc: Any) -> Restore | None:
    if doc is None:
        return None
    entry = _require(doc, "latest.restored")
    checkpoint_id, when = _int(entry.get("id")), _int(entry.get("restore_timestamp"))
    if checkpoint_id is None or when is None:
        raise FlinkRestError(f"latest.restored without id or restore_timestamp: {json.dumps(entry)[:200]}")
    path = entry.get("external_path")
    return Restore(
        checkpoint_id,
        when,
        bool(entry.get("is_savepoint", False)),
        path if isinstance(path, str) and path else None,
    )


def parse_checkpoints(doc: Any) -> Checkpoints:
    body = _require(doc, "/jobs/:id/checkpoints")
    latest = body.get("latest") or {}
    counts = body.get("counts") or {}
    history = body.get("history") or []
    if not isinstance(history, list) or not isinstance(latest, Mapping) or not isinstance(counts, Mapping):
        raise FlinkRestError("/jobs/:id/checkpoints: history, latest or counts of the wrong type")
    stats = {s.checkpoint_id: s for s in (parse_stat(h) for h in history)}
    completed = latest.get("completed")
    if completed is not None:
        # latest.completed stays when a burst of failures pushed it out of the history.
        newest = parse_stat(completed)
        stats.setdefault(newest.checkpoint_id, newest)
    return Checkpoints(
        history=tuple(stats[i] for i in sorted(stats)),
        restored=parse_restore(latest.get("restored")),
        completed_count=_int(counts.get("completed")) or 0,
        failed_count=_int(counts.get("failed")) or 0,
    )


def parse_config_entries(doc: Any) -> dict[str, str]:
    """A JobManager configuration (`/jobmanager/config`, `/jobs/:id/jobmanager/config`): a list of
    {key, value}."""
    if not isinstance(doc, list):
        raise FlinkRestError("the JobManager configuration is not a list of entries")
    return {str(e["key"]): str(e.get("value")) for e in doc if isinstance(e, Mapping) and "key" in e}


def num_retained(entries: Mapping[str, str]) -> int | None:
    for key in NUM_RETAINED_KEYS:
        if key in entries:
            try:
                return int(entries[key])
            except ValueError:
                return None
    return None


def parse_checkpoint_config(doc: Any, entries: Mapping[str, str]) -> CheckpointConfig:
    body = _require(doc, "/jobs/:id/checkpoints/config")
    external = body.get("externalization") or {}
    return CheckpointConfig(
        interval_ms=_int(body.get("interval")),
        externalized=bool(external.get("enabled", False)),
        delete_on_cancellation=bool(external.get("delete_on_cancellation", True)),
        num_retained=num_retained(entries),
        directory=next((entries[k] for k in CHECKPOINT_DIR_KEYS if entries.get(k)), None),
    )


def parse_job_parameters(doc: Any) -> dict[str, str]:
    """`/jobs/:id/config`: the parameters a job published (`execution-config.user-config`: Flink's
    global job parameters, where `ParameterTool` and `pipeline.global-job-parameters` put them)."""
    body = _require(doc, "/jobs/:id/config")
    execution = body.get("execution-config") or {}
    user = execution.get("user-config") if isinstance(execution, Mapping) else None
    if not isinstance(user, Mapping):
        return {}
    return {str(k): str(v) for k, v in user.items() if v is not None}


@dataclass(frozen=True)
class CommitMetrics:
    """Where a job's Kafka source commit counters are: the source vertex and the metric ids."""

    vertex_id: str
    failed: str
    succeeded: str | None


@dataclass(frozen=True)
class CommitCounts:
    """The commit counters summed over the source's subtasks, at one sample."""

    failed: int
    succeeded: int | None


def source_vertices(doc: Any) -> list[str]:
    """`/jobs/:id`: the ids of the vertices whose name says they hold a source (`Source: ...`)."""
    vertices = _require(doc, "/jobs/:id").get("vertices") or []
    return [
        str(v["id"])
        for v in vertices
        if isinstance(v, Mapping) and "id" in v and str(v.get("name", "")).startswith("Source")
    ]


def commit_metric_ids(doc: Any) -> tuple[str, str | None] | None:
    """A vertex's metric list (`/jobs/:id/vertices/:vid/subtasks/metrics`): the ids of its Kafka
    source's commitsFailed and commitsSucceeded counters, or None when it has none (yet: they are
    registered when the source's readers start)."""
    if not isinstance(doc, list):
        raise FlinkRestError("a vertex's metric list is not a list")
    ids = [str(m["id"]) for m in doc if isinstance(m, Mapping) and "id" in m]

    def named(name: str) -> str | None:
        return next((i for i in ids if i.split(".")[-2:] in ([g, name] for g in COMMIT_METRIC_GROUPS)), None)

    failed = named(COMMITS_FAILED)
    return None if failed is None else (failed, named(COMMITS_SUCCEEDED))


def parse_commit_counts(doc: Any, metrics: CommitMetrics) -> CommitCounts | None:
    """Aggregated metric values (`...?get=a,b&agg=sum`, a list of {id, sum}); None when the failed
    counter is not reported."""
    if not isinstance(doc, list):
        raise FlinkRestError("aggregated metrics are not a list")
    sums: dict[str, int] = {}
    for row in doc:
        if isinstance(row, Mapping) and "id" in row and row.get("sum") is not None:
            try:
                sums[str(row["id"])] = int(float(row["sum"]))
            except (TypeError, ValueError):
                continue
    if metrics.failed not in sums:
        return None
    return CommitCounts(
        sums[metrics.failed], None if metrics.succeeded is None else sums.get(metrics.succeeded)
    )


def retention_warnings(config: CheckpointConfig, poll_s: float) -> list[str]:
    """What in the job's configuration makes the sidecar likely to miss checkpoints, said at start."""
    warnings = []
    retained = config.num_retained if config.num_retained is not None else NUM_RETAINED_DEFAULT
    if config.num_retained is None:
        warnings.append(
            "the JobManager's configuration does not set execution.checkpointing.num-retained: Flink keeps "
            f"{NUM_RETAINED_DEFAULT} checkpoint and deletes it when the next completes; set it to 3 or more"
        )
    elif retained < 2:
        warnings.append(
            f"execution.checkpointing.num-retained is {retained}: each checkpoint is deleted when the next "
            "completes, and one the sidecar has not read by then is missed; set it to 3 or more"
        )
    if config.interval_ms is not None and retained * config.interval_ms < 2000 * poll_s:
        warnings.append(
            f"{retained} retained checkpoint(s) every {config.interval_ms} ms stay on disk about "
            f"{retained * config.interval_ms} ms, less than two polls ({poll_s:g} s each): retain more"
        )
    if not config.externalized or config.delete_on_cancellation:
        warnings.append(
            "checkpoints are not retained on cancellation (externalized checkpoint retention "
            "RETAIN_ON_CANCELLATION): the last ones vanish with a cancelled job and no import can read them"
        )
    return warnings


class FlinkRestHttpError(FlinkRestError):
    """The JobManager answered with an HTTP error status."""

    def __init__(self, url: str, status: int) -> None:
        super().__init__(f"Flink REST API answered {status} to {url}")
        self.status = status


def urllib_open(url: str, timeout_s: float) -> bytes:
    """GET ``url``: its body, or a FlinkRestError naming the URL (no credentials are in it: the REST
    URL is the JobManager's address)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        raise FlinkRestHttpError(url, exc.code) from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FlinkRestError(f"Flink REST API unreachable at {url}: {reason}") from exc


class FlinkRest:
    """GETs of one JobManager's REST API, paced and timed out."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        pacer: Pacer | None = None,
        opener: Opener = urllib_open,
    ) -> None:
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UsageError(f"--rest must be the JobManager's http(s) URL, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.pacer = pacer or Pacer()
        self.opener = opener
        self.requests = 0

    def get(self, path: str) -> Any:
        self.pacer.wait()
        self.requests += 1
        url = f"{self.base_url}{path}"
        body = self.opener(url, self.timeout_s)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise FlinkRestError(f"{url} did not answer JSON: {body[:100]!r}") from exc

    def jobs(self) -> list[JobSummary]:
        return parse_overview(self.get("/jobs/overview"))

    def job(self, job_id: str) -> JobSummary | None:
        """The job, or None when the JobManager does not know it (404)."""
        try:
            return parse_job(self.get(f"/jobs/{urllib.parse.quote(job_id)}"))
        except FlinkRestHttpError as exc:
            if exc.status == 404:
                return None
            raise

    def checkpoints(self, job_id: str) -> Checkpoints:
        return parse_checkpoints(self.get(f"/jobs/{urllib.parse.quote(job_id)}/checkpoints"))

    def checkpoint_config(self, job_id: str) -> CheckpointConfig:
        """The job's checkpointing, with the retention option from its JobManager configuration (the
        job's own, Flink 1.19+, else the cluster's)."""
        quoted = urllib.parse.quote(job_id)
        config = self.get(f"/jobs/{quoted}/checkpoints/config")
        entries: dict[str, str] = {}
        for path in (f"/jobs/{quoted}/jobmanager/config", "/jobmanager/config"):
            try:
                entries = parse_config_entries(self.get(path))
            except FlinkRestHttpError:
                continue
            if num_retained(entries) is not None:
                break
        return parse_checkpoint_config(config, entries)

    def commit_metrics(self, job_id: str) -> CommitMetrics | None:
        """Where the job's Kafka source counts its commits, or None (not exposed, not registered yet)."""
        quoted = urllib.parse.quote(job_id)
        for vertex in source_vertices(self.get(f"/jobs/{quoted}")):
            found = commit_metric_ids(self.get(f"/jobs/{quoted}/vertices/{vertex}/subtasks/metrics"))
            if found is not None:
                return CommitMetrics(vertex, *found)
        return None

    def commit_counts(self, job_id: str, metrics: CommitMetrics) -> CommitCounts | None:
        """The commit counters now, summed over the source's subtasks (REST serves metrics from a
        cache refreshed every `metrics.fetcher.update-interval`, 10 s by default)."""
        names = ",".join(n for n in (metrics.failed, metrics.succeeded) if n is not None)
        path = f"/jobs/{urllib.parse.quote(job_id)}/vertices/{metrics.vertex_id}/subtasks/metrics"
        return parse_commit_counts(self.get(f"{path}?get={names}&agg=sum"), metrics)

    def job_parameter(self, job_id: str, key: str) -> str | None:
        """The value of ``key`` the job published: among its global job parameters, else in its own
        configuration (`/jobs/:id/jobmanager/config`, Flink 1.19+); None when neither has it."""
        quoted = urllib.parse.quote(job_id)
        value = parse_job_parameters(self.get(f"/jobs/{quoted}/config")).get(key)
        if value is not None:
            return value
        try:
            return parse_config_entries(self.get(f"/jobs/{quoted}/jobmanager/config")).get(key)
        except FlinkRestHttpError:
            return None


def newest_by_name(jobs: Sequence[JobSummary], name: str) -> JobSummary | None:
    """The job named ``name`` to follow: a running one before a terminated one, then the latest start."""
    named = [j for j in jobs if j.name == name]
    return max(named, key=lambda j: (not j.terminal, j.start_ms, j.job_id), default=None)
