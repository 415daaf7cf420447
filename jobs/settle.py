"""Settle jobs: check results, reviews, merges and closes decide a pushed run."""

from __future__ import annotations

import asyncio

from bot.domain.issue_text import github_time
from bot.domain.model import IssueRef, Run
from bot.workflows import settle
from jobs import job, services


@job
def settle_head(installation_id: int, repo: str, head_sha: str) -> str:
    """Settle the runs that pushed head_sha, if its checks are final; return what happened."""
    runs = asyncio.run(_settle_head(installation_id, repo, head_sha))
    return ", ".join(run.state.value for run in runs) or "unchanged"


async def _settle_head(installation_id: int, repo: str, head_sha: str) -> list[Run]:
    """Settle one head, never twice at once: a duplicate waits, then finds it settled.

    The result is noted first: a run not yet recorded as pushed finds it once it is,
    and looks then (bot/workflows/attempt.py).
    """
    ctx = services()
    ctx.store.note_check_result(repo, head_sha)
    async with ctx.store.settle_lock(repo, head_sha):
        return await settle.settle_head(ctx, installation_id, repo, head_sha)


@job
def settle_review(
    installation_id: int, repo: str, pull: int, review_id: int, author: str, submitted_at: str = ""
) -> str:
    """Send a review's requested changes back to the agent; return what happened."""
    submitted = github_time(submitted_at)  # None when GitHub gave no time, or no valid one
    run = asyncio.run(
        settle.settle_review(services(), installation_id, repo, pull, review_id, author, submitted)
    )
    return run.state.value if run is not None else "unchanged"


@job
def settle_pull_closed(installation_id: int, repo: str, pull: int, merged: int) -> str:
    """End the run of a merged or closed pull request; return what happened."""
    run = asyncio.run(
        settle.settle_pull_closed(services(), installation_id, repo, pull, bool(merged))
    )
    return run.state.value if run is not None else "unchanged"


@job
def settle_issue_closed(installation_id: int, repo: str, number: int) -> str:
    """Stop the work on an issue a human closed."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    asyncio.run(settle.settle_issue_closed(services(), issue))
    return "done"


@job
def label_taken_off(installation_id: int, repo: str, number: int, label: str, sender: str) -> str:
    """Withdraw the issue if a maintainer took its queue or in-progress label off."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    return asyncio.run(settle.settle_label_taken_off(services(), issue, label, sender))


@job
def issue_deleted(installation_id: int, repo: str, number: int) -> str:
    """End the work on an issue a maintainer deleted."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    settle.end_gone_issue(services(), issue, "was deleted")
    return "gone"
