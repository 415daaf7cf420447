"""Pull request events: reviews that request changes, merges and closes of Baton's PRs."""

from __future__ import annotations

import logging
from typing import Any

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.domain.commands import ignored_bot
from bot.domain.jobs import pull_closed_job, review_job
from bot.edges.git import BRANCH_PREFIX
from bot.web.delivery import HandlerContext

log = logging.getLogger(__name__)
router = Router()


def _batons(pull: dict[str, Any]) -> bool:
    return str(pull["head"]["ref"]).startswith(BRANCH_PREFIX)


@router.register("pull_request", action="closed")
async def pull_closed(event: Event, ctx: HandlerContext) -> None:
    """End the run of a Baton PR that was merged or closed."""
    pull = event.data["pull_request"]
    installation_id = ctx.installation_id(event)
    if _batons(pull) and installation_id is not None:
        repo = event.data["repository"]["full_name"]
        ctx.enqueue(pull_closed_job(installation_id, repo, pull["number"], bool(pull["merged"])))


@router.register("pull_request_review", action="submitted")
async def review_submitted(event: Event, ctx: HandlerContext) -> None:
    """Send requested changes on a Baton PR back to the agent; the job judges the reviewer."""
    review, pull = event.data["review"], event.data["pull_request"]
    if str(review["state"]).lower() != "changes_requested" or not _batons(pull):
        return
    author = str(review["user"]["login"])
    if ignored_bot(author, review["user"].get("type"), ctx.settings.trusted_bots):
        log.info("delivery %s: ignored a review by the bot @%s", event.delivery_id, author)
        return
    installation_id = ctx.installation_id(event)
    if installation_id is not None and not ctx.sent_by_baton(event):
        repo = event.data["repository"]["full_name"]
        submitted = str(review.get("submitted_at") or "")
        ctx.enqueue(
            review_job(installation_id, repo, pull["number"], review["id"], author, submitted)
        )
