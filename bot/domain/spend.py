"""Agent spend over the rolling 30 days, and whether the monthly budgets let a new issue start.

Pure. The ledger (bot/edges/store/spend.py) adds each attempt's cost and turns, once, to
the UTC day its agent ended on, for its repository and for the deployment. A monthly
budget is judged over the rolling 30 days: today (UTC) and the 29 days before it, the
same window the status views show. A day's spend leaves the window at 00:00 UTC thirty
days later, so a spent budget lets new issues start again the moment enough of its
oldest spend has left.

A budget stops new issues (fresh starts and chain links), not the work of issues
already started: their continuations are bounded per issue by `max_cost_usd`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.domain.model import MAX_RUN_COST_USD, Run
from bot.domain.render import STATUS_MARKER, instant
from bot.domain.repo_config import CONFIG_PATH
from bot.ops.settings import Settings

WINDOW_DAYS = 30
SHOWN_DAYS = 7  # the days the status page shows one by one, today first


class AgentSpend(BaseModel):
    """What agents spent: US dollars, turns and attempts (an agent may report neither)."""

    model_config = ConfigDict(frozen=True)

    cost_usd: float = 0.0
    turns: int = 0
    attempts: int = 0

    def __add__(self, other: AgentSpend) -> AgentSpend:
        return AgentSpend(
            cost_usd=self.cost_usd + other.cost_usd,
            turns=self.turns + other.turns,
            attempts=self.attempts + other.attempts,
        )


class DaySpend(AgentSpend):
    """What agents spent on one UTC day."""

    day: date


class Budgets(BaseModel):
    """The monthly budgets a repository's new issues start under."""

    model_config = ConfigDict(frozen=True)

    deployment_usd: float | None = Field(default=None, description="`BATON_MONTHLY_BUDGET_USD`")
    repository_usd: float | None = Field(
        default=None,
        description="the repository's own `monthly_budget_usd`, where below the deployment's",
    )

    @classmethod
    def of(cls, deployment: Settings, repository: Settings) -> Budgets:
        """Return the budgets from the deployment's settings and the repository's applied ones.

        A repository's file can only lower the deployment's budget; one that repeats it,
        or sets none, leaves the deployment's as the only budget.
        """
        ours, applied = deployment.monthly_budget_usd, repository.monthly_budget_usd
        own = applied if applied is not None and (ours is None or applied < ours) else None
        return cls(deployment_usd=ours, repository_usd=own)


class Spending(BaseModel):
    """What a new start is judged by: the budgets, and the spend per day in the window."""

    model_config = ConfigDict(frozen=True)

    budgets: Budgets = Field(default_factory=Budgets)
    deployment: tuple[DaySpend, ...] = ()
    repository: tuple[DaySpend, ...] = ()


class Ledger(BaseModel):
    """The ledger over the window, for the status views: the deployment's and each repository's.

    budgets are the repositories' own, as the latest start of each read its file.
    """

    model_config = ConfigDict(frozen=True)

    deployment: tuple[DaySpend, ...] = ()
    repositories: Mapping[str, tuple[DaySpend, ...]] = Field(default_factory=dict)
    budgets: Mapping[str, float] = Field(default_factory=dict)


class BudgetState(BaseModel):
    """A budget against the spend in the window: what is left, or when starts resume."""

    model_config = ConfigDict(frozen=True)

    budget_usd: float
    spent_usd: float
    since: date | None = Field(description="the oldest day in the window with spend")
    frees_at: datetime | None = Field(
        description="while spent: when enough of the oldest spend leaves the window"
    )

    @property
    def exhausted(self) -> bool:
        """Return whether the budget is spent: no new issue starts under it."""
        return self.frees_at is not None

    @property
    def left_usd(self) -> float:
        """Return what is left of the budget (nothing once spent)."""
        return max(0.0, self.budget_usd - self.spent_usd)


class BudgetSpent(BaseModel):
    """The spent budget that holds a repository's new issues, and until when."""

    model_config = ConfigDict(frozen=True)

    scope: Literal["deployment", "repository"]
    repo: str
    state: BudgetState

    @property
    def frees_at(self) -> datetime:
        """Return when new issues may start again, if nothing more is spent meanwhile."""
        assert self.state.frees_at is not None  # a spent budget frees at an instant
        return self.state.frees_at


def window(now: datetime) -> tuple[date, ...]:
    """Return the UTC days of the rolling window at now, oldest first."""
    today = now.astimezone(UTC).date()
    return tuple(today - timedelta(days=back) for back in range(WINDOW_DAYS - 1, -1, -1))


def leaves_window(day: date) -> datetime:
    """Return when a day's spend leaves the rolling window."""
    return datetime.combine(day + timedelta(days=WINDOW_DAYS), time(), UTC)


def in_window(days: Iterable[DaySpend], now: datetime) -> tuple[DaySpend, ...]:
    """Return the days within the window at now, oldest first."""
    within = set(window(now))
    return tuple(sorted((day for day in days if day.day in within), key=lambda day: day.day))


def total(days: Iterable[AgentSpend]) -> AgentSpend:
    """Return what the days spent in all."""
    return sum(days, AgentSpend())


def shown_days(days: Iterable[DaySpend], now: datetime) -> tuple[DaySpend, ...]:
    """Return the days the status page shows one by one, today first, a day without spend at 0."""
    by_day = {day.day: day for day in days}
    return tuple(by_day.get(day, DaySpend(day=day)) for day in reversed(window(now)[-SHOWN_DAYS:]))


def budget_state(budget_usd: float, days: Iterable[DaySpend], now: datetime) -> BudgetState:
    """Return the budget against the days' spend in the window at now.

    Spent once the window's spend reaches the budget; it frees when the oldest days
    that leave the window take the spend back below it.
    """
    spending = [day for day in in_window(days, now) if day.cost_usd > 0]
    running = list(itertools.accumulate(day.cost_usd for day in spending))
    spent = running[-1] if running else 0.0
    since = spending[0].day if spending else None
    if spent < budget_usd:
        return BudgetState(budget_usd=budget_usd, spent_usd=spent, since=since, frees_at=None)
    # Once every day has left, nothing is spent: some day's leaving always frees it.
    freeing = next(
        day for day, gone in zip(spending, running, strict=True) if spent - gone < budget_usd
    )
    return BudgetState(
        budget_usd=budget_usd, spent_usd=spent, since=since, frees_at=leaves_window(freeing.day)
    )


def budget_spent(repo: str, spending: Spending, now: datetime) -> BudgetSpent | None:
    """Return the spent budget that holds the repository's new issues now; None if none does.

    Where both are spent, the one that frees later holds them (the deployment's on a tie).
    """
    budgets = spending.budgets
    scopes: list[tuple[Literal["deployment", "repository"], float | None, tuple[DaySpend, ...]]]
    scopes = [
        ("deployment", budgets.deployment_usd, spending.deployment),
        ("repository", budgets.repository_usd, spending.repository),
    ]
    spent = [
        BudgetSpent(scope=scope, repo=repo, state=state)
        for scope, budget, days in scopes
        if budget is not None and (state := budget_state(budget, days, now)).exhausted
    ]
    return max(spent, key=lambda held: held.frees_at, default=None)


def usd(amount: float) -> str:
    """Return an amount of US dollars as the status views write it."""
    return f"${amount:,.2f}"


def budget_wait_comment(held: BudgetSpent, queue_label: str, now: datetime) -> str:
    """Return the status comment of a new issue that waits, unstarted, for a spent budget."""
    state = held.state
    if held.scope == "deployment":
        whose = (
            f"This deployment's monthly budget of {usd(state.budget_usd)} "
            "(`BATON_MONTHLY_BUDGET_USD`)"
        )
        spenders = "agents"
    else:
        whose = (
            f"`{held.repo}`'s monthly budget of {usd(state.budget_usd)} "
            f"(`monthly_budget_usd` in `{CONFIG_PATH}`)"
        )
        spenders = "its agents"
    since = f", since {state.since.isoformat()}" if state.since is not None else ""
    return "\n".join(
        [
            STATUS_MARKER,
            "**Baton** · waiting for the monthly budget",
            "",
            f"{whose} is spent: {spenders} spent {usd(state.spent_usd)} over the rolling "
            f"{WINDOW_DAYS} days{since}. No new issue starts until that spend falls below the "
            "budget; issues already under way go on. Nothing was spent on this one.",
            "",
            f"Next: starting at {instant(held.frees_at, now)}, when the oldest spend leaves "
            f"the {WINDOW_DAYS}-day window. To start it sooner, raise the budget, then take "
            f"`{queue_label}` off the issue that was queued and put it back.",
        ]
    )


def run_cost_cap(run: Run) -> float:
    """Return the most one run counts for in the ledger: its issue's cost cap, or
    MAX_RUN_COST_USD without one. What an agent says it spent is its claim."""
    cap = run.policy.limits.max_cost_usd if run.policy is not None else None
    return cap if cap is not None else MAX_RUN_COST_USD
