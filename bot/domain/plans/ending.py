"""How an attempt ended short of its pull request: the run's state, why, and its facts.

Pure. From what the agent said (its AgentResult), what git showed (the commits it
added, whether they change any file) and whether pushing them failed; the facts are
what bot/domain/classify.py judges the run by. And a pushed head whose pull request
GitHub would not open yet: it is put off and tried again, its pushed work kept, so the
agent never runs twice for one head.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from bot.domain.classify import Ending, RunFacts
from bot.domain.leaks import Leak
from bot.domain.model import AgentResult, PendingPull, Run, RunState

STOPPED = "stopped by a maintainer"
# Server errors opening a pull request before its attempt fails as pr-failed; the first
# is tried again a minute later, each next one twice as late (1, 2, 4, 8 minutes).
PULL_TRIES = 5
PULL_RETRY_S = 60.0
NO_CHANGE = "the agent finished without changing any file"
LEAKS_NAMED = 5  # the escalation names this many leaks, and counts the rest


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
    result: AgentResult,
    new_commits: int,
    changed: bool,
    push_failure: str | None = None,
    leaks: Sequence[Leak] = (),
) -> End | None:
    """Return how the attempt ended once its agent did; None when it opens its pull request.

    new_commits are the commits it added, changed whether they change any file,
    push_failure why pushing them failed, where it did, and leaks the credentials
    they carry, which kept them from being pushed at all.
    """
    if leaks:
        where = "; ".join(str(leak) for leak in leaks[:LEAKS_NAMED])
        more = f" (and {len(leaks) - LEAKS_NAMED} more)" if len(leaks) > LEAKS_NAMED else ""
        reason = f"the agent's commits carry a credential, so nothing was pushed: {where}{more}"
        return ended("credential-found", RunState.FAILED, reason, result, new_commits)
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


def put_off(
    run: Run, why: str, now: datetime, *, draft: bool, until: datetime | None = None
) -> Run | End:
    """Return the pushed run with its pull request put off, or its end when GitHub failed too often.

    until is when GitHub asked the installation to wait (a secondary rate limit): no
    failure, the pull request is tried then. Without it, GitHub answered with a server
    error: it is tried again later, and the PULL_TRIES-th error ends the attempt.
    """
    tries = run.pull_pending.tries if run.pull_pending is not None else 0
    if until is None:
        tries += 1
        if tries >= PULL_TRIES:
            reason = f"opening the pull request failed {tries} times: {why}"
            return ended("pr-failed", RunState.FAILED, reason, run.agent_result)
        until = now + timedelta(seconds=PULL_RETRY_S * 2 ** (tries - 1))
    pending = PendingPull(at=until, draft=draft, tries=tries, why=why)
    pushed = run
    if run.state is not RunState.PUSHED_PENDING:
        pushed = run.moved(RunState.PUSHED_PENDING, now)
    return pushed.model_copy(update={"pull_pending": pending})


def with_pull(
    run: Run, number: int, url: str, now: datetime, *, drafts_refused: bool = False
) -> Run | None:
    """Return the run with the pull request that opened for it; None when it has one already.

    A pull request that was put off opens its run's wait for checks again: CI that runs
    on pull requests starts only now.
    """
    if run.pull_pending is None or run.state is not RunState.PUSHED_PENDING:
        return None
    opened = run.moved(RunState.PUSHED_PENDING, now, note=f"pull request #{number} opened")
    return opened.model_copy(
        update={
            "pull_pending": None,
            "pr_number": number,
            "pr_url": url,
            "drafts_refused": drafts_refused,
        }
    )
