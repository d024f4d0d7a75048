"""The Flink jobs a watch follows (config `watch.flink_jobs`): one `app.flink.follower.FlinkFollower`
each, started before the watch's Spark session and closed with the watch.

A cycle's step waits until each follower has ended a poll begun after the cycle started, so the
judging steps after it see every checkpoint Flink completed before the cycle. A job whose JobManager
does not answer yet is asked again at every poll of its follower, failing no cycle (the other jobs
are still judged: the ledger of that job just has nothing new, as with a `flink-watch` that is down);
an unknown job id fails the first cycle (a usage error: the watch ends with exit 2); a poll that
could not write the ledger fails the cycle, so its window is judged again.
"""

from __future__ import annotations

import logging
from typing import Any

from app.config import FlinkJobConfig
from app.contracts import vocabulary as vocab
from app.errors import InfrastructureError, KafkaUnavailableError
from app.flink.follower import FlinkFollower, SidecarSettings, open_sidecar
from app.pipeline.context import AuditContext

log = logging.getLogger(__name__)

CATCH_UP_S = 180.0  # a poll decodes and writes a few checkpoints: seconds, minutes on a starved machine


def sidecar_settings(
    job: FlinkJobConfig, ledger: str, ctx: AuditContext, bootstrap: str | None
) -> SidecarSettings:
    """What `flink-watch` would be given for ``job``, writing the watch's own ledger."""
    return SidecarSettings(
        job.rest,
        job.job,
        ledger,
        flink_job_id=job.job_id,
        flink_job_name=job.job_name,
        group_id=job.group_id,
        poll_s=job.poll_s,
        startup_mode=job.starting_offsets,
        startup_key=job.starting_offsets_key,
        kafka=ctx.cfg.kafka,
        bootstrap=bootstrap,
        storage_options=ctx.cfg.storage.options,
    )


class FlinkFollowers:
    """The watch's followers, by the job name their ledger events carry."""

    def __init__(self, ctx: AuditContext, jobs: list[FlinkJobConfig]) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.followers: dict[str, FlinkFollower] = {}

    def _bootstrap(self) -> str | None:
        """The broker a follower asks where a run without state started; None (no start offsets
        recorded for such runs) when it cannot be located."""
        try:
            return self.ctx.broker.locate()
        except KafkaUnavailableError as exc:
            log.warning("Flink followers: %s; runs started without state get no start offsets", exc)
            return None

    def start(self) -> None:
        """Starts the followers not started yet (their first contact is theirs, in their thread).
        The watch command calls it before its Spark session starts: Flink completes and deletes
        checkpoints in those tens of seconds."""
        for job in self.jobs:
            if job.job not in self.followers:
                settings = sidecar_settings(job, self.ctx.tables.ledger.location, self.ctx, self._bootstrap())
                self.followers[job.job] = FlinkFollower(open_sidecar(settings), job.job).start()

    def step(self) -> dict[str, Any]:
        """Starts the followers not started yet, then waits until each has caught up with now."""
        self.start()
        summary: dict[str, Any] = {}
        for job in self.jobs:
            follower = self.followers[job.job]
            if not follower.caught_up(CATCH_UP_S):
                raise InfrastructureError(
                    f"the follower of Flink job {job.job} ended no poll in {CATCH_UP_S:.0f} s"
                )
            if follower.usage_error is not None:
                raise follower.usage_error  # an unknown job id: no later cycle fixes it
            if follower.error is not None:
                raise InfrastructureError(f"Flink job {job.job}: its last poll failed: {follower.error}")
            done = follower.sidecar.watcher.summary
            summary[job.job] = {
                "followed": follower.connected,
                "runs": list(done.runs),
                vocab.DETAIL_CHECKPOINTS_RECORDED: done.checkpoints_recorded,
                "missed": len(done.missed),
            }
        return summary

    def close(self) -> None:
        for follower in self.followers.values():
            follower.close()
        self.followers.clear()
