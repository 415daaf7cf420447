"""Chain jobs: plan a queued chain, and move it on as its links settle."""

from __future__ import annotations

import asyncio

from bot import chainwork
from bot.model import IssueRef
from jobs import services


def queue_chain(installation_id: int, repo: str, number: int) -> str:
    """Plan the chain the queued issue names and start its first incomplete link."""
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    chain = asyncio.run(chainwork.queue_chain(services(), issue))
    return f"links {', '.join(f'#{n}' for n in chain.links)}" if chain else "not queued"


def advance_chain(installation_id: int, repo: str, head: int) -> str:
    """Start, hold or finish the next link of the chain queued at head."""
    asyncio.run(chainwork.advance_chain(services(), installation_id, repo, head))
    return "advanced"
