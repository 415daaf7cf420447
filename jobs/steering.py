"""The command job: a maintainer's `/baton` comment, carried out and answered."""

from __future__ import annotations

import asyncio

from bot.workflows import steer as steering
from jobs import job, services


@job
def handle_command(installation_id: int, repo: str, number: int, comment_id: int) -> str:
    """Carry out the command in a comment; return the reaction it got."""
    reaction = asyncio.run(
        steering.handle_command(services(), installation_id, repo, number, comment_id)
    )
    return reaction or "not a command"
