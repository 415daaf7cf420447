"""Chain jobs: plan a queued chain, and move it on as its links settle."""

from __future__ import annotations

import asyncio

from bot import chainwork
from bot.model import IssueRef
from jobs import job, services


@job
def queue_chain(installation_id: int, repo: str, number: int) -> str:
    """Plan the chain the queued issue names and start its first incomplete link.

    Returns whether it was queued; its links are in the log.
    """
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    chain = asyncio.run(chainwork.queue_chain(services(), issue))
    return "queued" if chain else "not queued"


@job
def advance_chain(installation_id: int, repo: str, head: int) -> str:
    """Start, hold or finish the next link of the chain queued at head."""
    asyncio.run(chainwork.advance_chain(services(), installation_id, repo, head))
    return "advanced"
