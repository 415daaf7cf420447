"""The run job: one attempt at one issue."""

from __future__ import annotations

import asyncio
import json

from bot.domain.issue_text import from_job
from bot.domain.jobs import RunMode
from bot.domain.model import IssueRef
from bot.workflows import attempt as runner
from jobs import job, services


@job
def run_issue(
    installation_id: int,
    repo: str,
    number: int,
    mode: str,
    after: int,
    queued_by: str = "",
    title: str = "",
    body: str = "",
    queued_at: str = "",
    how: str = "",
    labels: str = "",
    agent: str = "",
) -> str:
    """Claim the issue and run one attempt; return the state it ended in.

    queued_by: who put the queue label on, for a fresh run ("": the run finds out).
    title, body, queued_at and how: the issue's text as queued, when the job carries it.
    labels: the labels its label event showed on the issue (JSON), when it did.
    agent: the agent `/baton start --agent` picked for it ("": none was).
    """
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    text = from_job(title, body, queued_at, how, queued_by or None)
    shown = tuple(str(name) for name in json.loads(labels)) if labels else None
    run = asyncio.run(
        runner.run_issue(
            services(), issue, RunMode(mode), after, queued_by or None, text, shown, agent or None
        )
    )
    return run.state.value if run is not None else "not started"
