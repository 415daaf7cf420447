"""Pure transitions of a run: what an event does to it, or that it does nothing."""

from __future__ import annotations

from datetime import datetime

from bot.checks import Verdict
from bot.model import Run, RunState


def settle_checks(run: Run, head_sha: str, verdict: Verdict, at: datetime) -> Run | None:
    """Return the run settled by its head's check verdict, or None if the verdict is not for it.

    Only a pushed run still waiting on this very head moves: a verdict for an
    older head, a repeated verdict, or one that is still pending changes nothing.
    """
    if run.state is not RunState.PUSHED_PENDING or run.head_sha != head_sha:
        return None
    if verdict is Verdict.GREEN:
        return run.moved(RunState.PUSHED_GREEN, at)
    if verdict is Verdict.RED:
        failed = run.moved(RunState.FAILED, at, note="checks failed")
        return failed.model_copy(
            update={"failure_class": "checks-failed", "reason": "the pull request's checks failed"}
        )
    return None
