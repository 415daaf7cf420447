"""An installation's hourly request budget, as GitHub reports it, and who may spend it.

GitHub gives each installation a primary rate limit per hour and says with every
answer how much of it is left (`x-ratelimit-remaining`) and when it refills
(`x-ratelimit-reset`). The sweep is housekeeping: it never spends the last part
of an hour's budget, which is left to runs, whose work a maintainer is waiting for.
"""

from __future__ import annotations

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
