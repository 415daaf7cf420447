"""A job GitHub asked to wait long is put back in the queue, not slept in its worker."""

from __future__ import annotations

import time

import redis
from rq import Queue, SimpleWorker
from rq.job import Job

from bot.domain.jobs import AGENTS
from bot.edges.queue import Dispatcher
from bot.ops.settings import Settings

PUT_BACK_FOR_S = 3600


def put_back(redis_url: str, installation_id: int, repo: str) -> str:
    """Stand in for a job told to wait an hour: put itself back and end."""
    dispatch = Dispatcher(redis.Redis.from_url(redis_url), Settings(REDIS_URL=redis_url))
    dispatch.enqueue_current_again(time.time() + PUT_BACK_FOR_S)
    return "paused"


def test_a_paused_job_is_scheduled_again_whole_for_the_end_of_its_wait(
    redis_url: str, settings: Settings
) -> None:
    connection = redis.Redis.from_url(redis_url)
    queue = Queue(AGENTS, connection=connection)
    queue.enqueue(put_back, redis_url, 7, "owner/widgets", job_id="run-owner-widgets-7")
    SimpleWorker([queue], connection=connection).work(burst=True)

    scheduled = queue.scheduled_job_registry.get_job_ids()
    assert len(scheduled) == 1 and scheduled[0].startswith("run-owner-widgets-7_paused-")
    again = Job.fetch(scheduled[0], connection=connection)
    assert again.args == (redis_url, 7, "owner/widgets")  # the same work, whole
    at = queue.scheduled_job_registry.get_scheduled_time(again)
    assert at.timestamp() >= time.time() + PUT_BACK_FOR_S - 60
