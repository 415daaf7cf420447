"""Chain jobs: plan a queued chain, and move it on as its links settle."""

from __future__ import annotations

import asyncio

from bot.domain.issue_text import from_job
from bot.domain.model import IssueRef
from bot.workflows import chain as chainwork
from jobs import job, services


@job
def queue_chain(
    installation_id: int,
    repo: str,
    number: int,
    queued_by: str = "",
    title: str = "",
    body: str = "",
    queued_at: str = "",
    how: str = "",
) -> str:
    """Plan the chain the queued issue names and start its first incomplete link.

    Returns whether it was queued; its links are in the log. queued_by: who put the
    queue label on ("": the job finds out). title, body, queued_at and how: the
    issue's text as queued, when the job carries it.
    """
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    text = from_job(title, body, queued_at, how, queued_by or None)
    chain = asyncio.run(chainwork.queue_chain(services(), issue, queued_by or None, text))
    return "queued" if chain else "not queued"


@job
def advance_chain(installation_id: int, repo: str, head: int) -> str:
    """Start, hold or finish the next link of the chain queued at head."""
    asyncio.run(chainwork.advance_chain(services(), installation_id, repo, head))
    return "advanced"
