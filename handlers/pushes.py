"""Push events to the default branch: the Baton file read again, Baton's PRs kept mergeable.

The web process routes `labeled` events by each repository's own queue label,
which it learns when a worker reads the repository's file; reading it as soon as
it changes means a renamed queue label works from the next label a maintainer adds.

Baton's pull requests target the default branch, or a chain link's branch, which only
Baton moves and its chain restacks. A push that moves the default branch may leave them
conflicting, or behind: the job looks at each (bot/domain/plans/mergeable.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.domain.jobs import mergeable_job, repo_config_job
from bot.domain.repo_config import CONFIG_PATH
from bot.web.delivery import HandlerContext

router = Router()

COMMITS_LISTED = 20  # a push event lists at most this many commits; more may hide the file
NO_COMMIT = "0" * 40  # what a push names as the commit a deleted branch is at


def touches_config(commits: Iterable[Mapping[str, Any]]) -> bool:
    """Return whether the pushed commits may have changed the Baton file."""
    listed = list(commits)
    if len(listed) >= COMMITS_LISTED:
        return True
    return any(
        CONFIG_PATH in (commit.get(change) or ())
        for commit in listed
        for change in ("added", "modified", "removed")
    )


@router.register("push")
async def config_pushed(event: Event, ctx: HandlerContext) -> None:
    """Read the repository's Baton file again when a push to its default branch changes it."""
    repo = event.data["repository"]
    if event.data.get("deleted") or event.data["ref"] != f"refs/heads/{repo['default_branch']}":
        return
    if not touches_config(event.data.get("commits") or ()):
        return
    installation_id = ctx.installation_id(event)
    if installation_id is not None:
        ctx.enqueue(repo_config_job(installation_id, repo["full_name"], event.data["after"]))


@router.register("push")
async def base_pushed(event: Event, ctx: HandlerContext) -> None:
    """Look at Baton's open pull requests on the default branch a push moved on."""
    repo = event.data["repository"]
    after = str(event.data["after"])
    if event.data.get("deleted") or after == NO_COMMIT:
        return  # nothing to merge: the branch is gone
    branch = repo["default_branch"]
    if event.data["ref"] != f"refs/heads/{branch}":
        return
    installation_id = ctx.installation_id(event)
    if installation_id is not None:
        ctx.enqueue(mergeable_job(installation_id, repo["full_name"], branch, after))
