"""The takeover job: conclude a run whose claim lapsed, so that its recovery starts at once.

The clock's takeover check enqueues it seconds after a dead worker's lock expires;
it ends the run exactly as the sweep would have minutes later.
"""

from __future__ import annotations

import asyncio

from bot.domain.model import IssueRef
from bot.edges.github import github_app
from bot.workflows.sweep import conclude_orphan
from jobs import job, services


@job
def orphan(installation_id: int, repo: str, number: int, attempt: int) -> str:
    """Conclude the attempt as orphaned: `orphaned`, or `held` / `ended` when it needs nothing."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    return asyncio.run(_orphan(issue, attempt))


async def _orphan(issue: IssueRef, attempt: int) -> str:
    ctx = services()
    if ctx.store.lock_holder(issue) is not None:
        return "held"  # claimed again since the check saw it lapse
    run = ctx.store.latest_run(issue)
    if run is None or run.attempt != attempt or not run.state.is_live:
        return "ended"
    async with github_app(ctx.settings, ctx.store) as app:
        gh = await app.for_installation(issue.installation_id)
        return "orphaned" if await conclude_orphan(ctx, gh, run) else "ended"
