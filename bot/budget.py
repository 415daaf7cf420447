"""Budgets: what an issue has spent, and whether the recovery its last run names may go ahead.

Pure, over the issue's run records. When a budget is spent the issue is never
handed back to the queue: it escalates, once, with the breakdown of what spent it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.model import Budget, Classification, Recovery, Run


class Limits(BaseModel):
    """An issue's budgets."""

    model_config = ConfigDict(frozen=True)

    max_attempts: int = Field(default=3, ge=1, description="failed attempts before escalating")
    max_continuations: int = Field(
        default=3, ge=0, description="continuations on the same branch before escalating"
    )
    max_reentries: int = Field(
        default=2, ge=0, description="resumptions after usage windows before escalating"
    )
    max_backoffs: int = Field(
        default=5, ge=0, description="retries charged to nothing, in a row, before escalating"
    )

    @property
    def max_runs(self) -> int:
        """Return how many attempts an issue can see: the first and every continuation."""
        return 1 + self.max_continuations


class Spend(BaseModel):
    """What an issue's runs have spent so far."""

    model_config = ConfigDict(frozen=True)

    continuations: int
    failed_attempts: int
    reentries: int
    backoffs_in_a_row: int
    by_class: dict[str, int]


class Decision(BaseModel):
    """Go ahead with a recovery, or escalate and say why."""

    model_config = ConfigDict(frozen=True)

    action: Recovery
    reason: str
    exhausted: Literal["continuations", "attempts", "reentries", "backoffs"] | None = None


def spend(runs: Sequence[Run]) -> Spend:
    """Return what the runs since a human last queued the issue have spent.

    A run's charge is made when it is classified: a continuation is paid for by
    the run that asks for it, an attempt by the run that failed.
    """
    fresh = [n for n, run in enumerate(runs) if run.queued_fresh]
    since = runs[fresh[-1] :] if fresh else runs
    classified = [run.classification for run in since if run.classification is not None]
    backoffs = 0
    for classification in reversed(classified):
        if classification.recovery is not Recovery.BACKOFF:
            break
        backoffs += 1
    return Spend(
        continuations=sum(1 for c in classified if c.charged_to is Budget.CONTINUATIONS),
        failed_attempts=sum(1 for c in classified if c.charged_to is Budget.ATTEMPTS),
        reentries=sum(1 for c in classified if c.charged_to is Budget.REENTRIES),
        backoffs_in_a_row=backoffs,
        by_class=dict(
            Counter(c.failure_class.value for c in classified if c.charged_to is not Budget.NOTHING)
        ),
    )


def decide(classification: Classification, spent: Spend, limits: Limits) -> Decision:
    """Return whether the classified run's recovery may go ahead within the issue's budgets.

    spent already counts the classified run: its charge is made, and the
    recovery goes ahead while the charges stay within the budget.
    """
    recovery = classification.recovery
    name = classification.failure_class.value
    if recovery in (Recovery.CONTINUE, Recovery.REQUEUE):
        if spent.continuations > limits.max_continuations:
            return Decision(
                action=Recovery.ESCALATE,
                reason=f"{name}, and all {limits.max_continuations} continuations are spent",
                exhausted="continuations",
            )
    elif recovery is Recovery.RETRY:
        if spent.failed_attempts >= limits.max_attempts:
            return Decision(
                action=Recovery.ESCALATE,
                reason=f"{name}, and all {limits.max_attempts} failed attempts are spent",
                exhausted="attempts",
            )
    elif recovery is Recovery.HALT and spent.reentries > limits.max_reentries:
        return Decision(
            action=Recovery.ESCALATE,
            reason=f"{name}, and all {limits.max_reentries} re-entries after usage windows "
            "are spent",
            exhausted="reentries",
        )
    elif recovery is Recovery.BACKOFF and spent.backoffs_in_a_row > limits.max_backoffs:
        return Decision(
            action=Recovery.ESCALATE,
            reason=f"{name} {spent.backoffs_in_a_row} times in a row",
            exhausted="backoffs",
        )
    elif recovery is Recovery.ESCALATE:
        return Decision(action=Recovery.ESCALATE, reason=f"{name}: {_WHY_ESCALATE[name]}")
    return Decision(action=recovery, reason=name)


_WHY_ESCALATE = {
    "turn-cap-spinning": "the agent used all its turns without committing anything",
    "wall-clock-cap-spinning": "the agent ran out of time without committing anything",
    "no-change": "the agent finished without changing anything",
    "provider-credit": "the provider refused on billing or credentials; waiting will not help",
    "cost-cap": "the agent stopped at its spending cap",
}
