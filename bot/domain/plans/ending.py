"""How an attempt ended short of its pull request: the run's state, why, and its facts.

Pure. From what the agent said (its AgentResult), what git showed (the commits it
added, whether they change any file) and whether pushing them failed; the facts are
what bot/domain/classify.py judges the run by.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from bot.domain.classify import Ending, RunFacts
from bot.domain.model import AgentResult, RunState

STOPPED = "stopped by a maintainer"
NO_CHANGE = "the agent finished without changing any file"


class End(BaseModel):
    """The end of an attempt: the state its run moves to, why, and the facts classified."""

    model_config = ConfigDict(frozen=True)

    state: RunState
    reason: str
    facts: RunFacts


def ended(
    ending: Ending,
    state: RunState,
    reason: str,
    agent: AgentResult | None = None,
    new_commits: int = 0,
) -> End:
    """Return the end of an attempt; agent is what its agent said, if it ran.

    The agent's stop reason counts only where the agent's own ending (or a stop)
    ended the attempt; what it said about its provider's window always does.
    """
    facts = RunFacts(
        ending=ending,
        stop_reason=agent.stop_reason if agent and ending in ("agent", "stopped") else None,
        new_commits=new_commits,
        resets_at=agent.resets_at if agent else None,
        detail=reason,
    )
    return End(state=state, reason=reason, facts=facts)


def after_agent(
    result: AgentResult, new_commits: int, changed: bool, push_failure: str | None = None
) -> End | None:
    """Return how the attempt ended once its agent did; None when it opens its pull request.

    new_commits are the commits it added, changed whether they change any file, and
    push_failure why pushing them failed, where it did.
    """
    if push_failure is not None:
        return ended("push-failed", RunState.FAILED, push_failure, result)
    if result.stop_reason == "cancelled":
        return ended("stopped", RunState.KILLED, STOPPED, result, new_commits)
    if result.status != "success":
        reason = result.result_text or result.stop_reason
        return ended("agent", RunState.FAILED, reason, result, new_commits)
    if not new_commits or not changed:
        # Counted as no commits: commits that change nothing are no progress.
        return ended("agent", RunState.NO_CHANGE, NO_CHANGE, result)
    return None
