"""The run job: one attempt at one issue."""

from __future__ import annotations

import asyncio

from bot import runner
from bot.dispatch import RunMode
from bot.model import IssueRef
from jobs import job, services


@job
def run_issue(installation_id: int, repo: str, number: int, mode: str, after: int) -> str:
    """Claim the issue and run one attempt; return the state it ended in."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    run = asyncio.run(runner.run_issue(services(), issue, RunMode(mode), after))
    return run.state.value if run is not None else "not started"
