"""An installation's hourly request budget, as GitHub reports it, and who may spend it.

GitHub gives each installation a primary rate limit per hour and says with every
answer how much of it is left (`x-ratelimit-remaining`) and when it refills
(`x-ratelimit-reset`). The sweep is housekeeping: it never spends the last part
of an hour's budget, which is left to runs, whose work a maintainer is waiting for.

Writes have secondary limits besides, which no header reports: GitHub documents at
most 80 content-creating requests a minute and 500 an hour per installation, and
asks integrations to send them one at a time, a second apart. Baton keeps to them
(WritePace) rather than learning them from refusals.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

SWEEP_RESERVE = 0.2  # the share of an hour's budget the sweep leaves to runs


class RateBudget(BaseModel):
    """One installation's primary rate limit as its last answer reported it."""

    model_config = ConfigDict(frozen=True)

    limit: int
    remaining: int
    reset_at: float  # epoch seconds
    seen_at: float

    def left_at(self, now: float) -> int:
        """Return how many requests are left at now (all of them once the hour has refilled)."""
        return self.limit if now >= self.reset_at else self.remaining


class WritePace(BaseModel):
    """How an installation's writes are spaced: every worker of the deployment shares it."""

    model_config = ConfigDict(frozen=True)

    interval_s: float  # the least time between two writes
    per_minute: int  # the most writes in any 60 seconds
    per_hour: int  # the most writes in any 3,600 seconds

    def giving_way(self) -> WritePace:
        """Return the pace of writes that give way (status edits): they leave a quarter of
        each window to the writes that matter more (labels, runs' state, pull requests)."""
        return self.model_copy(
            update={
                "per_minute": max(self.per_minute - self.per_minute // 4, 1),
                "per_hour": max(self.per_hour - self.per_hour // 4, 1),
            }
        )


def budget_from_headers(headers: Mapping[str, str], now: float) -> RateBudget | None:
    """Read a response's `x-ratelimit-*` headers; None when it carries none (or bad ones)."""
    try:
        return RateBudget(
            limit=int(headers["x-ratelimit-limit"]),
            remaining=int(headers["x-ratelimit-remaining"]),
            reset_at=float(headers["x-ratelimit-reset"]),
            seen_at=now,
        )
    except (KeyError, ValueError):
        return None


def sweep_may_spend(budget: RateBudget | None, now: float) -> bool:
    """Tell whether the sweep may read an installation: never into the runs' reserve."""
    if budget is None:
        return True
    return budget.left_at(now) > budget.limit * SWEEP_RESERVE


# GitHub's wait when a secondary-limit answer names none, doubled per repeated answer.
SECONDARY_STOP_S = 60.0
LONGEST_STOP_S = 24 * 3600.0
# A job that would wait longer than this is put back in the queue, not slept in a worker.
HOLD_WORKER_S = 30.0


def secondary_stop_s(retry_after: str | None, consecutive: int) -> float:
    """Return how long every request to an installation stops after a secondary-limit answer.

    GitHub's Retry-After is honoured in full, hours included; when it is missing or
    malformed (not a finite number of seconds), a minute, doubled for each answer in
    a row (60, 120, 240, ...). Nothing stops longer than a day: an answer asking for
    more is not one GitHub gives, and must not silence an installation for ever.
    """
    seconds = -1.0
    if retry_after is not None:
        with contextlib.suppress(ValueError):
            seconds = float(retry_after)
    if not math.isfinite(seconds) or seconds < 0:
        seconds = SECONDARY_STOP_S * 2 ** max(consecutive - 1, 0)
    return float(min(seconds, LONGEST_STOP_S))


def reschedules(wait_s: float) -> bool:
    """Tell whether a wait is long enough that the job is put back rather than slept."""
    return wait_s > HOLD_WORKER_S
