"""Issue events: the queue label starts a run."""

from __future__ import annotations

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.dispatch import run_issue_job
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
