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
from types import FrameType
from typing import Any

from rq import Worker

from bot.agents.process import die_with_parent

log = logging.getLogger(__name__)

EXIT_MARGIN_S = 2.0  # of the grace period, what the worker keeps for its own exit
_stopping = threading.Event()


def stopping() -> bool:
    """Return whether this process (a work horse) was asked to stop: its worker is going."""
    return _stopping.is_set()


def _asked_to_stop(_signum: int, _frame: FrameType | None) -> None:
    _stopping.set()


class BatonWorker(Worker):
    """RQ's forking worker, whose horse stops gracefully and dies with it."""

    def __init__(self, *args: Any, grace_seconds: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.grace_seconds = grace_seconds
        self._worker_pid = os.getpid()

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
