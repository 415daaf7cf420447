"""From an accepted delivery to RQ jobs, with the webhook acknowledged in between.

The web process verifies, routes and records: one Redis call per batch of
deliveries marks each delivery id seen and appends the jobs its handlers chose
to the intake stream (`Store`/`IntakeLog`), and only then answers 202. A
forwarder beside each worker turns stream entries into RQ jobs. RQ's own
bookkeeping (building and saving a job) costs far more than the acknowledgement
itself, so it stays off the path GitHub waits on; the stream keeps every
accepted delivery until its jobs are queued, whoever crashes in between.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.process
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

import redis
from pydantic import ValidationError

from bot.domain.jobs import JOB_SPECS, JobSpec
from bot.edges.queue import Dispatcher
from bot.edges.store import IntakeEntry, IntakeLog, Store
from bot.ops.logs import configure_logging
from bot.ops.settings import load_settings

log = logging.getLogger(__name__)

READ_BATCH = 500
READ_BLOCK_MS = 1000
GATHER_S = 0.01
# A forwarder's batch ends within a read's block: longer than this, it hangs.
STOP_WAIT_S = 5.0
RECLAIM_IDLE_MS = 30_000  # an entry read this long ago and not acknowledged lost its forwarder


@dataclass
class _Pending:
    delivery_id: str
    jobs: str
    answer: asyncio.Future[bool]


class Intake:
    """The web side: record deliveries in batches, with one Redis call in flight at a time.

    A delivery that finds no write in flight writes itself at once, on its own
    task, so a quiet server answers without an extra turn of the event loop.
    Deliveries that arrive while a write is in flight wait and go together in
    the next one: under load each Redis call carries many deliveries.
    """

    def __init__(self, log_: IntakeLog) -> None:
        self._log = log_
        self._pending: list[_Pending] = []
        self._writing = False
        self._next_write: asyncio.Future[None] | None = None

    async def submit(self, delivery_id: str, jobs: Sequence[JobSpec]) -> bool:
        """Record the delivery and its jobs unless it was seen before; return whether it was new."""
        pending = _Pending(
            delivery_id,
            JOB_SPECS.dump_json(list(jobs)).decode(),
            asyncio.get_running_loop().create_future(),
        )
        self._pending.append(pending)
        if not self._writing:
            self._writing = True
            await self._write()
        return await pending.answer

    async def _write(self) -> None:
        batch, self._pending = self._pending, []
        try:
            fresh = await self._log.accept([(p.delivery_id, p.jobs) for p in batch])
        except Exception as exc:
            for pending in batch:
                pending.answer.set_exception(exc)
        except BaseException:
            # A cancelled writer must not leave the deliveries it carried waiting forever.
            interrupted = redis.ConnectionError("the intake write was interrupted")
            for pending in batch:
                pending.answer.set_exception(interrupted)
            raise
        else:
            for pending, new in zip(batch, fresh, strict=True):
                pending.answer.set_result(new)
        finally:
            if self._pending:
                # Held so the task is not collected while it waits for Redis.
                self._next_write = asyncio.ensure_future(self._write())
            else:
                self._writing = False


def forward(
    store: Store, dispatch: Dispatcher, entries: Sequence[IntakeEntry], reclaimed: bool = False
) -> int:
    """Enqueue the jobs of intake entries, then acknowledge them; return how many jobs.

    Entries reclaimed from a forwarder that died may have had their jobs queued
    already; those jobs are left out by id. New entries cannot have.
    """
    specs: list[JobSpec] = []
    for entry in entries:
        try:
            specs += JOB_SPECS.validate_json(entry.jobs)
        except ValidationError as exc:
            # Not retryable: keeping it would block nothing but would be retried forever.
            log.error(
                "intake entry for delivery %s is unreadable; dropped: %s", entry.delivery_id, exc
            )
    dispatch.enqueue(specs, skip_existing=reclaimed)
    store.ack_intake([entry.entry_id for entry in entries])
    if specs:
        log.info("queued %s", ", ".join(spec.job_id for spec in specs))
    return len(specs)


def forward_once(store: Store, dispatch: Dispatcher, consumer: str, block_ms: int | None) -> int:
    """Forward what is waiting (and what a dead forwarder left); return how many jobs."""
    forwarded = 0
    reclaimed = store.reclaim_intake(consumer, RECLAIM_IDLE_MS, READ_BATCH)
    if reclaimed:
        forwarded += forward(store, dispatch, reclaimed, reclaimed=True)
    fresh = store.read_intake(consumer, READ_BATCH, block_ms)
    if fresh:
        forwarded += forward(store, dispatch, fresh)
    return forwarded


def run_forwarder() -> None:
    """Forward intake entries to RQ until SIGTERM or SIGINT (a worker's companion process)."""
    settings = load_settings()
    store = Store.from_url(settings.redis_url)
    dispatch = Dispatcher.from_url(settings.redis_url, settings)
    consumer = f"{socket.gethostname()}-{os.getpid()}"
    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    store.ensure_intake_group()
    log.info("intake forwarder %s started", consumer)
    while not stopping:
        try:
            if forward_once(store, dispatch, consumer, READ_BLOCK_MS):
                # Let the next deliveries gather: under load one RQ round trip then
                # carries many jobs, for a delay no run would notice.
                time.sleep(GATHER_S)
        except Exception:
            log.exception("intake forwarder %s: forwarding failed; retrying", consumer)
            time.sleep(1)


class ForwarderProcess:
    """Keep one forwarder process running beside a worker, restarting it if it dies."""

    def __init__(self, verbose: bool) -> None:
        self._verbose = verbose
        self._context = multiprocessing.get_context("spawn")
        self._stopping = threading.Event()
        self._process = self._start()
        self._watcher = threading.Thread(target=self._watch, name="intake-watch", daemon=True)
        self._watcher.start()

    def _start(self) -> multiprocessing.process.BaseProcess:
        process = self._context.Process(
            target=_forwarder_main, args=(self._verbose,), name="baton-intake", daemon=True
        )
        process.start()
        return process

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            if not self._process.is_alive() and not self._stopping.is_set():
                log.error("intake forwarder exited (%s); restarting it", self._process.exitcode)
                self._process = self._start()

    def winding_down(self) -> None:
        """Restart the forwarder no more: its worker is stopping (the platform's SIGTERM
        reaches the forwarder too, and a new one would only delay the worker's exit)."""
        self._stopping.set()

    def stop(self) -> None:
        """Stop the forwarder and wait for it to finish its batch; kill it if it hangs.

        A forwarder that outlived its wait would hold the worker's exit for good:
        Python joins a process's children as it exits, past the platform's SIGKILL.
        """
        self.winding_down()
        self._process.terminate()
        self._process.join(STOP_WAIT_S)
        if self._process.is_alive():
            log.error(
                "intake forwarder still running %.0f s after SIGTERM; killing it", STOP_WAIT_S
            )
            self._process.kill()
            self._process.join(STOP_WAIT_S)


def _forwarder_main(verbose: bool) -> None:
    configure_logging(verbose)
    run_forwarder()
