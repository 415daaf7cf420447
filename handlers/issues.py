"""Issue events: the queue label starts a run."""

from __future__ import annotations

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.dispatch import issue_closed_job, run_issue_job
from handlers.context import HandlerContext

router = Router()


@router.register("issues", action="labeled")
async def queue_label_added(event: Event, ctx: HandlerContext) -> None:
    """Run the issue when a human puts the queue label on it."""
    if event.data["label"]["name"] != ctx.settings.queue_label or ctx.sent_by_baton(event):
        return
    issue = ctx.issue_ref(event)
    if issue is not None:
        ctx.enqueue(run_issue_job(ctx.settings, issue, event.delivery_id))


@router.register("issues", action="closed")
async def issue_closed(event: Event, ctx: HandlerContext) -> None:
    """Stop any work on an issue a human closed; its labels come off, its work stays."""
    issue = ctx.issue_ref(event)
    if issue is not None and not ctx.sent_by_baton(event):
        ctx.enqueue(issue_closed_job(issue))
