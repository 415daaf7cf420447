"""Baton's RQ worker: a graceful stop on SIGTERM, and no work horse outliving its worker.

On the first SIGTERM the worker takes no new job and passes the signal to its work
horse, whose run checkpoints the agent's work, records itself as interrupted and
hands the issue to another worker. The horse has until the grace period ends
(BATON_SHUTDOWN_GRACE_SECONDS, set below the platform's own: Heroku kills 30 s after
SIGTERM) and is killed then; a second SIGTERM kills it at once. Whatever a killed
horse left is found later as an orphan.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from rq import Worker

from bot.agents.process import die_with_parent

log = logging.getLogger(__name__)

EXIT_MARGIN_S = 2.0  # of the grace period, what the worker keeps for its own exit
READER_WAIT_S = 1.0  # the longest a command-channel read waits, and so its reader's stop
_stopping = threading.Event()


def stopping() -> bool:
    """Return whether this process (a work horse) was asked to stop: its worker is going."""
    return _stopping.is_set()


def _asked_to_stop(_signum: int, _frame: FrameType | None) -> None:
    _stopping.set()


class BatonWorker(Worker):
    """RQ's forking worker, whose horse stops gracefully and dies with it.

    on_stop, when given, is called as the first SIGTERM arrives. report_uncontained,
    when given, is told at every heartbeat that this worker runs its agents with the
    sandbox off, and for how long that report holds, so every status page and
    `baton status` shows it, whichever machine they run on.
    """

    def __init__(
        self,
        *args: Any,
        grace_seconds: float,
        report_uncontained: Callable[[str, float], None] | None = None,
        on_stop: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.grace_seconds = grace_seconds
        self._on_stop = on_stop
        self._report_uncontained = report_uncontained
        self._worker_pid = os.getpid()

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        """Keep the worker registered, and its report of running uncontained with it."""
        super().heartbeat(timeout, pipeline)
        if self._report_uncontained is not None:
            self._report_uncontained(self.name, (timeout or self.worker_ttl) + 60)

    def subscribe(self) -> None:
        """Listen on the worker's command channel, with a reader that stops within a second.

        rq's reader waits up to a minute per read, and rq stops it by waiting for it: a
        reader that saw the unsubscribe before it was told to stop held the exit a
        minute, past the platform's SIGKILL (redis-py 8 waits with no bound).
        """
        log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        # rq declares the thread None until it subscribes.
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[assignment]
            sleep_time=READER_WAIT_S, daemon=True, exception_handler=self._pubsub_exception_handler
        )

    def setup_work_horse_signals(self) -> None:
        """In the horse: die with the worker, and take SIGTERM as a request to wind down.

        The horse runs in a process group of its own, so a signal to the worker's
        group, or the worker's death, reaches it only through here.
        """
        super().setup_work_horse_signals()  # type: ignore[no-untyped-call]
        die_with_parent(self._worker_pid)
        signal.signal(signal.SIGTERM, _asked_to_stop)

    def handle_warm_shutdown_request(self) -> None:
        """Ask the horse to wind down, and kill it when the grace period is over."""
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]
        if self._on_stop is not None:
            self._on_stop()
        horse = self.horse_pid
        if not horse:
            return
        log.warning(
            "stopping: the running job has %.0f s to checkpoint and hand over",
            self.grace_seconds,
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(horse, signal.SIGTERM)
        deadline = threading.Timer(
            max(self.grace_seconds - EXIT_MARGIN_S, 0.0), self._grace_over, (horse,)
        )
        deadline.daemon = True
        deadline.start()

    def _grace_over(self, horse: int) -> None:
        if self.horse_pid == horse:
            log.warning("the grace period is over: killing the work horse; the sweep takes over")
            self.kill_horse()
