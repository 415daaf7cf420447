"""Pull request events: reviews that request changes, merges and closes of Baton's PRs."""

from __future__ import annotations

import logging

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.domain.commands import ignored_bot
from bot.domain.jobs import pull_closed_job, review_job
from bot.edges.git import BRANCH_PREFIX
from bot.web.delivery import HandlerContext

log = logging.getLogger(__name__)
router = Router()


def _batons(event: Event, ctx: HandlerContext) -> bool:
    """Tell whether the event's pull request is from one of Baton's branches: named so, and
    in the repository itself, or in fork mode in the fork (anyone's fork can name a branch
    `baton/…`)."""
    head = event.data["pull_request"]["head"]
    head_owner = str(head["repo"]["full_name"]).split("/")[0] if head["repo"] else ""
    owner = ctx.settings.fork_owner or str(event.data["repository"]["full_name"]).split("/")[0]
    return str(head["ref"]).startswith(BRANCH_PREFIX) and head_owner.casefold() == owner.casefold()


@router.register("pull_request", action="closed")
async def pull_closed(event: Event, ctx: HandlerContext) -> None:
    """End the run of a Baton PR that was merged or closed."""
    pull = event.data["pull_request"]
    installation_id = ctx.installation_id(event)
    if _batons(event, ctx) and installation_id is not None:
        repo = event.data["repository"]["full_name"]
        ctx.enqueue(pull_closed_job(installation_id, repo, pull["number"], bool(pull["merged"])))


@router.register("pull_request_review", action="submitted")
async def review_submitted(event: Event, ctx: HandlerContext) -> None:
    """Send requested changes on a Baton PR back to the agent; the job judges the reviewer."""
    review, pull = event.data["review"], event.data["pull_request"]
    if str(review["state"]).lower() != "changes_requested" or not _batons(event, ctx):
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
