"""Issue events: the queue label starts a run, or a chain when the issue names one."""

from __future__ import annotations

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.chains import names_a_chain
from bot.dispatch import issue_closed_job, queue_chain_job, run_issue_job
from handlers.context import HandlerContext

router = Router()


@router.register("issues", action="labeled")
async def queue_label_added(event: Event, ctx: HandlerContext) -> None:
    """Run the issue when a human puts the queue label on it."""
    repo = event.data["repository"]["full_name"]
    if event.data["label"]["name"] != ctx.queue_label(repo) or ctx.sent_by_baton(event):
        return
    issue = ctx.issue_ref(event)
    if issue is None:
        return
    if names_a_chain(event.data["issue"].get("body"), issue.repo):
        ctx.enqueue(queue_chain_job(issue, event.delivery_id))
    else:
        ctx.enqueue(run_issue_job(ctx.settings, issue, event.delivery_id))


@router.register("issues", action="closed")
async def issue_closed(event: Event, ctx: HandlerContext) -> None:
    """Stop any work on an issue a human closed; its labels come off, its work stays."""
    issue = ctx.issue_ref(event)
    if issue is not None and not ctx.sent_by_baton(event):
        ctx.enqueue(issue_closed_job(issue))
