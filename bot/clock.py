"""The clock: keeps a deployment's time whatever its workers are doing.

It runs the reconcile sweep, on schedule and in its own thread, so a sweep never
waits behind a long agent run: an orphaned run or a lost webhook is found on time
whatever the workers do. It is the sweep's one schedule. It also runs RQ's
scheduler, which moves jobs scheduled for a time (a usage window's resume, a
backoff, a retry) onto their queues when they fall due. One clock per deployment
is enough and a second is harmless: a sweep takes a lease and RQ's scheduler a
lock per queue.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from rq.scheduler import RQScheduler

from bot.dispatch import QUEUES
from bot.recovery import Services
from bot.sweep import sweep

log = logging.getLogger(__name__)

SCHEDULER_TICK_S = 1.0  # RQ schedules by whole seconds


def keep_time(services: Services, stop: threading.Event) -> None:
    """Sweep every interval and move due scheduled jobs, until stop is set."""
    sweeper = threading.Thread(
        target=_sweep_every_interval, args=(services, stop), name="sweep", daemon=True
    )
    sweeper.start()
    scheduler = RQScheduler(QUEUES, connection=services.dispatch.connection)
    scheduler.register_birth()
    try:
        while not stop.is_set():
            if scheduler.should_reacquire_locks:
                # A worker's scheduler may hold a queue's lock; whoever holds it moves the jobs.
                scheduler.acquire_locks()  # type: ignore[no-untyped-call]
            if scheduler.acquired_locks:
                scheduler.heartbeat()  # type: ignore[no-untyped-call]
                scheduler.enqueue_scheduled_jobs()  # type: ignore[no-untyped-call]
            stop.wait(SCHEDULER_TICK_S)
    finally:
        scheduler.stop()  # type: ignore[no-untyped-call]
        sweeper.join(timeout=5)


def _sweep_every_interval(services: Services, stop: threading.Event) -> None:
    interval = services.settings.sweep_interval_seconds
    while not stop.is_set():
        try:
            asyncio.run(sweep(services))
        except Exception:
            # The next pass tries again; a clock that stopped sweeping would be worse.
            log.exception("sweep failed; next pass in %.0fs", interval)
        stop.wait(interval)
