"""The label job: apply an issue's recorded Baton label (RQ retries it on failure)."""

from __future__ import annotations

import asyncio

from bot.domain.model import IssueRef
from bot.edges.github import github_app
from bot.workflows.labels import recorded_labels
from bot.workflows.labels import sync_labels as sync
from jobs import job, services


@job
def sync_labels(installation_id: int, repo: str, number: int) -> str:
    """Bring the issue's Baton labels to their recorded state."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    asyncio.run(_sync(issue))
    return "synced"


async def _sync(issue: IssueRef) -> None:
    ctx = services()
    async with github_app(ctx.settings, ctx.store) as app:
        gh = await app.for_installation(issue.installation_id)
        await sync(gh, ctx.store, recorded_labels(ctx.store, ctx.settings, issue), issue)
