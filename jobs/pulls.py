"""The pull request job: open the pull request GitHub put off for an attempt's pushed head."""

from __future__ import annotations

import asyncio

from bot.domain.model import IssueRef
from bot.workflows.pulls import open_put_off_pull
from jobs import job, services


@job
def open_pull(installation_id: int, repo: str, number: int, attempt: int) -> str:
    """Open the attempt's pull request: `opened`, `put-off` again, `failed`, or `nothing`."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    return asyncio.run(open_put_off_pull(services(), issue, attempt))
