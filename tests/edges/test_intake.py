"""The intake: deliveries recorded once with their jobs, forwarded to RQ exactly once."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.process
import multiprocessing.synchronize
import signal
import time
from collections.abc import AsyncIterator

import pytest
import redis
from rq import Queue

from bot.domain.jobs import AGENTS, JOB_SPECS, run_issue_job
from bot.domain.model import IssueRef
from bot.edges import intake
from bot.edges.intake import Intake, forward, forward_once
from bot.edges.queue import Dispatcher
from bot.edges.store import IntakeLog, Store
from bot.ops.settings import Settings

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=5)


@pytest.fixture
async def intake_log(redis_url: str) -> AsyncIterator[IntakeLog]:
    log_ = IntakeLog.from_url(redis_url)
    yield log_
    await log_.close()


def jobs_for(settings: Settings, delivery: str) -> str:
    return JOB_SPECS.dump_json([run_issue_job(settings, ISSUE, delivery)]).decode()


def queued_ids(dispatch: Dispatcher) -> list[str]:
    queue: Queue = dispatch.queues[AGENTS]
    return list(queue.job_ids)


async def test_a_delivery_is_accepted_once_within_and_across_batches(
    intake_log: IntakeLog, store: Store, settings: Settings
) -> None:
    first = await intake_log.accept(
        [("d1", jobs_for(settings, "d1")), ("d2", jobs_for(settings, "d2"))]
    )
    again = await intake_log.accept(
        [
            ("d1", jobs_for(settings, "d1")),
            ("d3", jobs_for(settings, "d3")),
            ("d3", jobs_for(settings, "d3")),
        ]
    )
    assert (first, again) == ([True, True], [False, True, False])
    assert store.intake_backlog() == 3


async def test_forwarding_queues_the_chosen_jobs_and_empties_the_stream(
    intake_log: IntakeLog, store: Store, dispatch: Dispatcher, settings: Settings
) -> None:
    await intake_log.accept([("d1", jobs_for(settings, "d1"))])
    store.ensure_intake_group()
    assert forward_once(store, dispatch, "f1", None) == 1
    assert queued_ids(dispatch) == [run_issue_job(settings, ISSUE, "d1").job_id]
    assert store.intake_backlog() == 0
    assert forward_once(store, dispatch, "f1", None) == 0


async def test_a_dead_forwarders_entries_are_reclaimed_and_queued_once(
    intake_log: IntakeLog,
    store: Store,
    dispatch: Dispatcher,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await intake_log.accept([("d1", jobs_for(settings, "d1")), ("d2", jobs_for(settings, "d2"))])
    store.ensure_intake_group()
    taken = store.read_intake("dying", 10, None)
    # It queued the first entry's jobs, then died before acknowledging anything.
    dispatch.enqueue(JOB_SPECS.validate_json(taken[0].jobs))
    assert store.read_intake("survivor", 10, None) == []
    monkeypatch.setattr(intake, "RECLAIM_IDLE_MS", 0)
    assert forward_once(store, dispatch, "survivor", None) == 2
    assert sorted(queued_ids(dispatch)) == sorted(
        run_issue_job(settings, ISSUE, d).job_id for d in ("d1", "d2")
    )
    assert store.intake_backlog() == 0


async def test_an_unreadable_entry_is_dropped_and_logged(
    intake_log: IntakeLog,
    store: Store,
    dispatch: Dispatcher,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await intake_log.accept([("bad", '[{"queue": 1}]'), ("d1", jobs_for(settings, "d1"))])
    store.ensure_intake_group()
    with caplog.at_level(logging.ERROR):
        assert forward(store, dispatch, store.read_intake("f", 10, None)) == 1
    assert "intake entry for delivery bad is unreadable" in caplog.text
    assert store.intake_backlog() == 0


def evalsha_calls(redis_url: str) -> int:
    stats = redis.Redis.from_url(redis_url).info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
    )


async def test_deliveries_arriving_together_share_redis_calls_and_get_their_own_answers(
    intake_log: IntakeLog, store: Store, settings: Settings, redis_url: str
) -> None:
    web_intake = Intake(intake_log)
    redis.Redis.from_url(redis_url).config_resetstat()
    deliveries = [f"d{n}" for n in range(40)] + ["d0", "d7"]
    answers = await asyncio.gather(
        *(web_intake.submit(d, [run_issue_job(settings, ISSUE, d)]) for d in deliveries)
    )
    assert answers == [True] * 40 + [False, False]
    assert store.intake_backlog() == 40
    # The first delivery writes alone; the rest wait for it and go in one more call.
    assert evalsha_calls(redis_url) == 2


async def test_the_intake_reconnects_when_redis_drops_its_connection(
    intake_log: IntakeLog, store: Store, settings: Settings, redis_url: str
) -> None:
    await intake_log.accept([("d1", jobs_for(settings, "d1"))])
    admin = redis.Redis.from_url(redis_url)
    (intake_client,) = [c for c in admin.client_list() if c["name"] == "baton-intake"]
    admin.client_kill_filter(_id=intake_client["id"])
    assert await intake_log.accept([("d2", jobs_for(settings, "d2"))]) == [True]
    assert store.intake_backlog() == 2


def test_job_specs_round_trip_through_json(settings: Settings) -> None:
    spec = run_issue_job(settings, ISSUE, "d9")
    assert JOB_SPECS.validate_json(JOB_SPECS.dump_json([spec])) == [spec]


def _deaf_forwarder(ready: multiprocessing.synchronize.Event) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(600)


class _DeafForwarder(intake.ForwarderProcess):
    """A forwarder hung where SIGTERM cannot end it."""

    def __init__(self) -> None:
        self.ready = multiprocessing.get_context("spawn").Event()
        super().__init__(verbose=False)

    def _start(self) -> multiprocessing.process.BaseProcess:
        process = self._context.Process(target=_deaf_forwarder, args=(self.ready,), daemon=True)
        process.start()
        return process


def test_a_hung_forwarder_is_killed_so_its_worker_can_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forwarder = _DeafForwarder()
    assert forwarder.ready.wait(30)
    forwarder.stop()
    # Python joins a process's children as it exits: none is left to hold the worker.
    assert multiprocessing.active_children() == []
    assert "killing it" in caplog.text
