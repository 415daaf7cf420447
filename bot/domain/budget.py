"""Budgets: what an issue has spent, and whether the recovery its last run names may go ahead.

Pure, over the issue's run records. When a budget is spent the issue is never
handed back to the queue: it escalates, once, with the breakdown of what spent it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bot.domain.model import Budget, Classification, Limits, Recovery, Run


class Spend(BaseModel):
    """What an issue's runs have spent so far."""

    model_config = ConfigDict(frozen=True)

    continuations: int
    failed_attempts: int
    reentries: int
    backoffs_in_a_row: int
    by_class: dict[str, int]
    cost_usd: float = 0.0


class Decision(BaseModel):
    """Go ahead with a recovery, or escalate and say why."""

    model_config = ConfigDict(frozen=True)

    action: Recovery
    reason: str
    exhausted: Literal["continuations", "attempts", "reentries", "backoffs", "cost"] | None = None


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
        cost_usd=sum(
            run.agent_result.cost_usd or 0.0 for run in since if run.agent_result is not None
        ),
    )


def decide(classification: Classification, spent: Spend, limits: Limits) -> Decision:
    """Return whether the classified run's recovery may go ahead within the issue's budgets.

    spent already counts the classified run: its charge is made, and the
    recovery goes ahead while the charges stay within the budget.
    """
    recovery = classification.recovery
    name = classification.failure_class.value
    if (
        recovery in _MORE_WORK
        and limits.max_cost_usd is not None
        and spent.cost_usd >= limits.max_cost_usd
    ):
        return Decision(
            action=Recovery.ESCALATE,
            reason=f"{name}, and ${spent.cost_usd:.2f} of the ${limits.max_cost_usd:.2f} "
            "cost cap is spent",
            exhausted="cost",
        )
    if recovery is Recovery.HALT and not limits.halt_on_usage_window:
        return Decision(
            action=Recovery.ESCALATE,
            reason=f"{name}: this repository does not resume after usage windows on its own "
            "(halt_on_usage_window is off)",
        )
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


# Recoveries that start another run of the agent, and so spend more.
_MORE_WORK = frozenset(
    {Recovery.CONTINUE, Recovery.REQUEUE, Recovery.RETRY, Recovery.BACKOFF, Recovery.HALT}
)

_WHY_ESCALATE = {
    "turn-cap-spinning": "the agent used all its turns without committing anything",
    "wall-clock-cap-spinning": "the agent ran out of time without committing anything",
    "no-change": "the agent finished without changing anything",
    "provider-credit": "the provider refused on billing or credentials; waiting will not help",
    "cost-cap": "the agent stopped at its spending cap",
    "audit-flagged": "the settlement audit flagged the green pull request's diff",
    "credential-found": "the agent's commits carry a credential, so nothing was pushed",
}
