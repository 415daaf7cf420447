"""Baton's jobs on RQ: the specs of bot/domain/jobs.py enqueued, batched, now or at an instant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from rq import Queue, Retry, get_current_job
from rq.job import Job, JobStatus
from rq.queue import EnqueueData

from bot.domain.jobs import (
    AGENTS,
    QUEUES,
    RUN_ISSUE,
    JobSpec,
    advance_chain_job,
    settle_head_job,
    sync_labels_job,
)
from bot.domain.model import Chain, IssueRef
from bot.ops.settings import Settings

RESULT_TTL_S = 24 * 3600
FAILURE_TTL_S = 14 * 24 * 3600


def _rq_options(spec: JobSpec) -> dict[str, Any]:
    """Return the RQ options every way of enqueueing a spec shares."""
    retries = spec.retry_intervals_s
    return {
        "job_id": spec.job_id,
        "result_ttl": RESULT_TTL_S,
        "failure_ttl": FAILURE_TTL_S,
        "description": spec.description,
        "retry": Retry(len(retries), list(retries)) if retries else None,
    }


class Dispatcher:
    """Put jobs on Baton's queues."""

    def __init__(self, connection: redis.Redis, settings: Settings) -> None:
        self.connection = connection
        self.settings = settings
        self.queues = {name: Queue(name, connection=connection) for name in QUEUES}

    @classmethod
    def from_url(cls, url: str, settings: Settings) -> Dispatcher:
        """Connect to the Redis RQ uses (RQ needs undecoded responses)."""
        return cls(redis.Redis.from_url(url), settings)

    def enqueue(self, specs: Sequence[JobSpec], skip_existing: bool = False) -> None:
        """Enqueue jobs in one round trip; with skip_existing, leave out ids RQ already has.

        A job id given twice (one review or comment in two deliveries) is enqueued once:
        RQ refuses a batch that names an id twice.
        """
        unique: dict[str, JobSpec] = {}
        for spec in specs:
            unique.setdefault(spec.job_id, spec)
        specs = list(unique.values())
        if skip_existing and specs:
            with self.connection.pipeline(transaction=False) as pipe:
                for spec in specs:
                    pipe.exists(Job.key_for(spec.job_id))
                known = pipe.execute()
            specs = [spec for spec, exists in zip(specs, known, strict=True) if not exists]
        by_queue: dict[str, list[EnqueueData]] = {}
        for spec in specs:
            by_queue.setdefault(spec.queue, []).append(
                Queue.prepare_data(
                    spec.func, spec.args, timeout=spec.timeout_s, **_rq_options(spec)
                )
            )
        with self.connection.pipeline() as pipe:
            for name, datas in by_queue.items():
                self.queues[name].enqueue_many(datas, pipeline=pipe)
            pipe.execute()

    def enqueue_later(self, spec: JobSpec, delay_s: float) -> None:
        """Enqueue a job after delay_s seconds (RQ's scheduler, run by the workers, moves it)."""
        self.enqueue_at(spec, datetime.now(UTC) + timedelta(seconds=delay_s))

    def enqueue_at(self, spec: JobSpec, when: datetime) -> None:
        """Enqueue a job at an instant (RQ's scheduler, run by the workers, moves it)."""
        # RQ schedules by whole seconds, rounding down: round up, so it is never early.
        not_before = when.replace(microsecond=0) + timedelta(seconds=1 if when.microsecond else 0)
        self.queues[spec.queue].enqueue_at(
            not_before, spec.func, *spec.args, job_timeout=spec.timeout_s, **_rq_options(spec)
        )

    def enqueue_current_again(self, until: float) -> None:
        """Schedule the running job again, with its arguments, for the instant until.

        Its id gains the instant, as RQ still holds the running job under its own; a
        repeat of the same wait names the same id, so it is scheduled once.
        """
        current = get_current_job()
        if current is None or current.func_name is None:
            raise RuntimeError("no RQ job is running to put back")
        base = current.id.split("_paused-", 1)[0]
        spec = JobSpec(
            func=current.func_name,
            args=tuple(current.args),
            job_id=f"{base}_paused-{int(until)}",
            queue=current.origin,
            timeout_s=int(current.timeout or 180),
            description=current.description or base,
            retry_intervals_s=tuple(current.retry_intervals or ()),
        )
        self.enqueue_at(spec, datetime.fromtimestamp(until, UTC))

    def enqueue_unless_pending(self, spec: JobSpec) -> bool:
        """Enqueue a job unless it already waits in its queue or runs; return whether it did.

        A job that is only scheduled is enqueued now: that is what a catch-up is for.
        """
        job = (
            Job.fetch(spec.job_id, connection=self.connection)
            if Job.exists(spec.job_id, connection=self.connection)
            else None
        )
        if job is not None and job.get_status() in (JobStatus.QUEUED, JobStatus.STARTED):
            return False
        self.enqueue([spec])
        return True

    def pending_runs(self) -> set[IssueRef]:
        """Return the issues a run job is on its way for: queued, scheduled, deferred or started."""
        queue = self.queues[AGENTS]
        ids = set(queue.get_job_ids())
        for registry in (
            queue.scheduled_job_registry,
            queue.deferred_job_registry,
            queue.started_job_registry,
        ):
            ids.update(registry.get_job_ids())
        jobs = Job.fetch_many(sorted(ids), connection=self.connection)
        return {
            IssueRef(
                installation_id=int(job.args[0]), repo=str(job.args[1]), number=int(job.args[2])
            )
            for job in jobs
            if job is not None and job.func_name == RUN_ISSUE
        }

    def settle_head_at(
        self, installation_id: int, repo: str, head_sha: str, when: datetime
    ) -> None:
        """Schedule settlement of head_sha at when: the moment its silence counts as no CI."""
        spec = settle_head_job(installation_id, repo, head_sha)
        self.enqueue_at(spec.model_copy(update={"job_id": f"{spec.job_id}-no-ci"}), when)

    def settle_head(self, installation_id: int, repo: str, head_sha: str) -> None:
        """Enqueue settlement of head_sha now, unless one waits in the queue already.

        One that is running may have looked too early, so another is enqueued then.
        """
        spec = settle_head_job(installation_id, repo, head_sha)
        if Job.exists(spec.job_id, connection=self.connection):
            queued = Job.fetch(spec.job_id, connection=self.connection).get_status()
            if queued is JobStatus.QUEUED:
                return
        self.enqueue([spec])

    def advance_chain(self, chain: Chain, because: str) -> None:
        """Enqueue a look at what the chain does next, after what changed."""
        self.enqueue([advance_chain_job(chain, because)])

    def sync_labels(self, issue: IssueRef) -> None:
        """Enqueue applying the issue's recorded Baton label, with retries."""
        self.enqueue([sync_labels_job(issue)])

    def depths(self) -> dict[str, int]:
        """Return how many jobs wait on each queue."""
        return {name: queue.count for name, queue in self.queues.items()}
