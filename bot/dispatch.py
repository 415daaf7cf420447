"""Enqueueing Baton's jobs on RQ: queue names, semantic job ids, explicit timeouts."""

from __future__ import annotations

import re

import redis
from rq import Queue

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


class Dispatcher:
    """Put jobs on Baton's queues; jobs receive ids, never events or tokens."""

    def __init__(self, connection: redis.Redis, settings: Settings) -> None:
        self.connection = connection
        self.settings = settings
        self.queues = {name: Queue(name, connection=connection) for name in QUEUES}

    @classmethod
    def from_url(cls, url: str, settings: Settings) -> Dispatcher:
        """Connect to the Redis RQ uses (RQ needs undecoded responses)."""
        return cls(redis.Redis.from_url(url), settings)

    def run_issue(self, issue: IssueRef, delivery_id: str) -> str:
        """Enqueue an attempt at the issue; the job claims it, so a duplicate is harmless."""
        job = self.queues[AGENTS].enqueue(
            "jobs.run.run_issue",
            issue.installation_id,
            issue.repo,
            issue.number,
            job_id=job_id("run", issue.repo, issue.number, delivery_id),
            # Longer than the agent's own cap, so the run ends itself and reports why.
            job_timeout=int(self.settings.agent_wall_clock_seconds) + 15 * 60,
            result_ttl=RESULT_TTL_S,
            failure_ttl=FAILURE_TTL_S,
            description=f"run {issue}",
        )
        return str(job.id)

    def settle_head(self, installation_id: int, repo: str, head_sha: str) -> str:
        """Enqueue settling the run that pushed head_sha from its check results."""
        job = self.queues[EVENTS].enqueue(
            "jobs.settle.settle_head",
            installation_id,
            repo,
            head_sha,
            job_id=job_id("settle", repo, head_sha),
            job_timeout=SETTLE_TIMEOUT_S,
            result_ttl=RESULT_TTL_S,
            failure_ttl=FAILURE_TTL_S,
            description=f"settle {repo}@{head_sha[:12]}",
        )
        return str(job.id)

    def depths(self) -> dict[str, int]:
        """Return how many jobs wait on each queue."""
        return {name: queue.count for name, queue in self.queues.items()}
