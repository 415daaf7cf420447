"""Pure transitions of a run: what an event does to it, or that it does nothing."""

from __future__ import annotations

from datetime import datetime

from bot.domain.checks import Verdict
from bot.domain.model import Run, RunState


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


def request_changes(
    run: Run, review_id: int, author: str, submitted_at: datetime | None, at: datetime
) -> Run | None:
    """Return the run failed by a review that requested changes, or None if it does not apply.

    Only a pushed run still awaiting its verdict or review moves; the same review
    delivered twice, or one for a run that already moved on, changes nothing. Nor does
    a review submitted before the run started (GitHub gives whole seconds): it was
    about an earlier attempt.
    """
    if run.state not in (RunState.PUSHED_PENDING, RunState.PUSHED_GREEN):
        return None
    if submitted_at is not None and submitted_at < run.started_at.replace(microsecond=0):
        return None
    failed = run.moved(RunState.FAILED, at, note=f"changes requested by @{author}")
    return failed.model_copy(
        update={
            "failure_class": "changes-requested",
            "reason": f"@{author} requested changes",
            "review_id": review_id,
        }
    )


def close_pull(run: Run, merged: bool, at: datetime) -> Run | None:
    """Return the run ended by its pull request being merged or closed, or None if it had been."""
    if run.state in (RunState.MERGED, RunState.CLOSED):
        return None
    return run.moved(RunState.MERGED if merged else RunState.CLOSED, at)
