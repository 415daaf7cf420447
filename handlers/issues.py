"""Issue events: the queue label starts a run."""

from __future__ import annotations

import logging

from gidgethub.routing import Router
from gidgethub.sansio import Event

from handlers.context import HandlerContext

log = logging.getLogger(__name__)
router = Router()


@router.register("issues", action="labeled")
async def queue_label_added(event: Event, ctx: HandlerContext) -> None:
    """Enqueue a run when a human puts the queue label on an issue."""
    if event.data["label"]["name"] != ctx.settings.queue_label or ctx.sent_by_baton(event):
        return
    issue = ctx.issue_ref(event)
    if issue is not None:
        job = ctx.dispatch.run_issue(issue, event.delivery_id)
        log.info("%s: queued by %s as job %s", issue, event.data["sender"]["login"], job)
