"""The mergeable job: Baton's open pull requests looked at after a push to their base."""

from __future__ import annotations

import asyncio

from bot.domain.plans.mergeable import Look
from bot.workflows import mergeable
from jobs import job, services


@job
def keep_mergeable(
    installation_id: int,
    repo: str,
    base: str,
    after: str,
    look: int = 0,
    pulls: str = "",
    updating: str = "",
) -> str:
    """Take one look at the push that left base at after; return what the look did.

    pulls and updating are comma-separated pull request numbers (bot/domain/jobs.py).
    """
    taken = Look(
        installation_id=installation_id,
        repo=repo,
        base=base,
        after=after,
        number=look,
        pulls=_numbers(pulls),
        updating=_numbers(updating),
    )
    return asyncio.run(mergeable.keep_mergeable(services(), taken))


def _numbers(listed: str) -> tuple[int, ...]:
    return tuple(int(number) for number in listed.split(",") if number)
