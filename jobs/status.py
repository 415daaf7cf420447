"""The status job: write a status report the installation's write pace put off."""

from __future__ import annotations

import asyncio

from bot.domain.model import IssueRef
from bot.edges.github import github_app
from bot.workflows.conclude import report_now
from jobs import job, services


@job
def refresh_status(installation_id: int, repo: str, number: int) -> str:
    """Make the issue's status comments say where its latest run is."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    return asyncio.run(_refresh(issue))


async def _refresh(issue: IssueRef) -> str:
    ctx = services()
    run = ctx.store.latest_run(issue)
    if run is None:
        return "no run"
    async with github_app(ctx.settings, ctx.store) as app:
        gh = await app.for_installation(issue.installation_id)
        # Writes still paused put this job back whole (jobs.job), for when they may go.
        await report_now(ctx, gh, run)
    return "reported"
