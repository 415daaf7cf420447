"""The clock: keeps a deployment's time whatever its workers are doing.

It runs the reconcile sweep, on schedule and in its own thread, so a sweep never
waits behind a long agent run: an orphaned run or a lost webhook is found on time
whatever the workers do. It is the sweep's one schedule. Between sweeps it checks
every few seconds, in Redis alone, for claims that lapsed (their worker died) and
has each such run concluded at once, so its continuation starts within seconds of
the lock expiring instead of at the next sweep. Every few minutes it asks GitHub again
for the webhook events Baton never got (bot/workflows/redelivery.py). It also runs
RQ's scheduler, which moves jobs scheduled for a time (a usage window's resume, a
backoff, a retry) onto their queues when they fall due. One clock per deployment is
enough and a second is harmless: a sweep takes a lease, RQ's scheduler a lock per
queue, a takeover is one job per attempt, and an event is asked for again once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence

from rq.scheduler import RQScheduler

from bot.domain.jobs import QUEUES, orphan_job
from bot.domain.model import IssueRef, Run
from bot.edges.store import LapsedClaim
from bot.workflows.redelivery import redeliver_lost
from bot.workflows.services import Services
from bot.workflows.sweep import sweep

log = logging.getLogger(__name__)

SCHEDULER_TICK_S = 1.0  # RQ schedules by whole seconds


def keep_time(services: Services, stop: threading.Event) -> None:
    """Sweep, check for lapsed claims, and move due scheduled jobs, until stop is set."""
    settings = services.settings
    repeating = [
        threading.Thread(
            target=_every,
            args=(what, interval, action, stop),
            name=what,
            daemon=True,
        )
        for what, interval, action in (
            ("sweep", settings.sweep_interval_seconds, lambda: asyncio.run(sweep(services))),
            ("takeover", settings.takeover_check_seconds, lambda: take_over_lapsed(services)),
            (
                "redelivery",
                settings.redelivery_interval_seconds,
                lambda: asyncio.run(redeliver_lost(services)),
            ),
        )
        if interval > 0
    ]
    for thread in repeating:
        thread.start()
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
        for thread in repeating:
            thread.join(timeout=5)


def _every(what: str, interval: float, action: Callable[[], object], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            action()
        except Exception:
            # The next pass tries again; a clock that stopped would be worse.
            log.exception("%s failed; next pass in %.0fs", what, interval)
        stop.wait(interval)


def takeovers(lapsed: Sequence[LapsedClaim]) -> tuple[list[Run], list[IssueRef]]:
    """Return the live runs to conclude as orphaned, and every lapsed claim to forget.

    A claim whose lock is held again (a heartbeat that just made it, a new claim) is
    left alone. One whose lock is gone while its issue's latest run is live lost its
    worker: that run is taken over. The rest ended without releasing (a worker that
    died after its run's last write, a claim that never started a run): nothing to do.
    """
    gone = [claim for claim in lapsed if not claim.locked]
    orphans = [claim.run for claim in gone if claim.run is not None and claim.run.state.is_live]
    return orphans, [claim.issue for claim in gone]


def take_over_lapsed(services: Services) -> list[Run]:
    """Enqueue the conclusion of every live run whose claim lapsed; return those runs.

    Redis only, no GitHub call: nothing lapsed costs one command.
    """
    store = services.store
    orphans, lapsed = takeovers(store.lapsed_claims())
    jobs = [orphan_job(run.issue, run.attempt) for run in orphans]
    # One job per attempt: a second clock, or a check that ran twice, adds nothing.
    services.dispatch.enqueue(jobs, skip_existing=True)
    for run, job in zip(orphans, jobs, strict=True):
        log.warning(
            "takeover: %s attempt %d's claim lapsed without a heartbeat (its worker died): "
            "concluding it now (job %s)",
            run.issue,
            run.attempt,
            job.job_id,
        )
    for issue in lapsed:
        store.forget_lapsed_claim(issue)  # after the enqueue: a clock that dies between re-sees it
    return orphans
