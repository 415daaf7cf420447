"""The command jobs: a maintainer's `/baton` comment, or a re-run of Baton's check run."""

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


@job
def handle_rerun(
    installation_id: int, repo: str, head_sha: str, login: str, kind: str, delivery_id: str
) -> str:
    """Take a re-run of Baton's check run as `/baton retry`; return what it came to."""
    reaction = asyncio.run(
        steering.handle_rerun(services(), installation_id, repo, head_sha, login, kind, delivery_id)
    )
    if reaction is None:
        return "ignored"
    return "retried" if reaction == "+1" else "not retried"
