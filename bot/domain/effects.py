"""What a plan asks to be done: the effects one executor performs, in order.

Pure data. Every workflow decision in bot/domain returns a plan, a tuple of these;
bot/workflows/execute.py is the one place that turns each into GitHub calls, Redis
writes and enqueued jobs, so a decision can be read, and tested, without any of them.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from bot.domain.jobs import JobSpec
from bot.domain.model import IssueRef, Labels
from bot.domain.render import CheckSummary


class _Effect(BaseModel):
    model_config = ConfigDict(frozen=True)


class SetLabel(_Effect):
    """Make label the issue's one Baton state label; None takes Baton's state labels off.

    labels are the names that applied to the run; live is what the issue carries,
    when the facts the plan was made from include it.
    """

    issue: IssueRef
    labels: Labels
    label: str | None
    live: frozenset[str] | None = None


class Report(_Effect):
    """Rewrite the issue's status comment (and its PR's) from the stored run."""

    issue: IssueRef
    attempt: int
    next_step: str | None = None
    checks: tuple[CheckSummary, ...] = ()


class PostStatus(_Effect):
    """Put body in the issue's status comment, for a state that is not a run's."""

    issue: IssueRef
    body: str


class Enqueue(_Effect):
    """Enqueue a job: now, after delay_s seconds, or at an instant."""

    job: JobSpec
    delay_s: float = 0.0
    at: datetime | None = None


Effect = SetLabel | Report | PostStatus | Enqueue
Plan = tuple[Effect, ...]
