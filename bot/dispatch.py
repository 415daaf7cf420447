"""Baton's jobs on RQ: queue names, semantic job ids, explicit timeouts, batched enqueueing."""

from __future__ import annotations

import re
from collections.abc import Sequence

import redis
from pydantic import BaseModel, ConfigDict, TypeAdapter
from rq import Queue
from rq.job import Job
from rq.queue import EnqueueData

from bot.model import IssueRef
from bot.settings import Settings

EVENTS = "baton-events"
AGENTS = "baton-agents"
MAINTENANCE = "baton-maintenance"
QUEUES = (EVENTS, MAINTENANCE, AGENTS)  # the order a worker on all of them takes work in

SETTLE_TIMEOUT_S = 120
RESULT_TTL_S = 24 * 3600
FAILURE_TTL_S = 14 * 24 * 3600
_NOT_IN_JOB_ID = re.compile(r"[^A-Za-z0-9_-]+")


def job_id(*parts: object) -> str:
    """Return an RQ job id (letters, digits, _ and - only) naming what the job is for."""
    return "-".join(_NOT_IN_JOB_ID.sub("_", str(part)) for part in parts)


class JobSpec(BaseModel):
    """One job to enqueue: a function path and ids, never an event or a token."""

    model_config = ConfigDict(frozen=True)

    queue: str
    func: str
    args: tuple[int | str, ...]
    job_id: str
    timeout_s: int
    description: str


JOB_SPECS = TypeAdapter(list[JobSpec])


def run_issue_job(settings: Settings, issue: IssueRef, delivery_id: str) -> JobSpec:
    """Return the job for an attempt at an issue (it claims the issue: a duplicate is harmless)."""
    return JobSpec(
        queue=AGENTS,
        func="jobs.run.run_issue",
        args=(issue.installation_id, issue.repo, issue.number),
        job_id=job_id("run", issue.repo, issue.number, delivery_id),
        # Longer than the agent's own cap, so the run ends itself and reports why.
        timeout_s=int(settings.agent_wall_clock_seconds) + 15 * 60,
        description=f"run {issue}",
    )


def settle_head_job(installation_id: int, repo: str, head_sha: str) -> JobSpec:
    """Return the job that settles the run which pushed head_sha from its check results."""
    return JobSpec(
        queue=EVENTS,
        func="jobs.settle.settle_head",
        args=(installation_id, repo, head_sha),
        job_id=job_id("settle", repo, head_sha),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"settle {repo}@{head_sha[:12]}",
    )


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
        """Enqueue jobs in one round trip; with skip_existing, leave out ids RQ already has."""
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
                    spec.func,
                    spec.args,
                    job_id=spec.job_id,
                    timeout=spec.timeout_s,
                    result_ttl=RESULT_TTL_S,
                    failure_ttl=FAILURE_TTL_S,
                    description=spec.description,
                )
            )
        with self.connection.pipeline() as pipe:
            for name, datas in by_queue.items():
                self.queues[name].enqueue_many(datas, pipeline=pipe)
            pipe.execute()

    def settle_head(self, installation_id: int, repo: str, head_sha: str) -> str:
        """Enqueue settlement of head_sha now; return the job id."""
        spec = settle_head_job(installation_id, repo, head_sha)
        self.enqueue([spec])
        return spec.job_id

    def depths(self) -> dict[str, int]:
        """Return how many jobs wait on each queue."""
        return {name: queue.count for name, queue in self.queues.items()}
