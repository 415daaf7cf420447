"""The worker's own stop: nothing of rq's holds its exit past the platform's SIGKILL."""

from __future__ import annotations

import time
from typing import Any

import redis
from rq import Queue

from bot.ops.worker import BatonWorker

HEROKU_KILL_S = 30  # Heroku: "the process has 30 seconds to shut down cleanly" after SIGTERM


def test_leaving_the_command_channel_never_waits_on_its_reader(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    worker = BatonWorker(
        [Queue("stopping", connection=connection)], connection=connection, grace_seconds=20
    )
    worker.subscribe()
    unsubscribe = worker.pubsub.unsubscribe

    def unsubscribe_then_lag(*args: Any) -> Any:
        # A loaded machine: the reader takes the unsubscribe before it is told to stop.
        answer = unsubscribe(*args)
        time.sleep(0.5)
        return answer

    worker.pubsub.unsubscribe = unsubscribe_then_lag
    began = time.monotonic()
    worker.unsubscribe()
    # rq's reader waited a minute for a new subscription, and its stop for the reader.
    assert time.monotonic() - began < HEROKU_KILL_S / 3
    assert worker.pubsub_thread is not None and not worker.pubsub_thread.is_alive()
