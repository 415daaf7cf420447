"""Check events: a completed suite on one of Baton's branches settles its run."""

from __future__ import annotations

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.dispatch import settle_head_job
from bot.git import BRANCH_PREFIX
from handlers.context import HandlerContext

router = Router()


@router.register("check_suite", action="completed")
async def check_suite_completed(event: Event, ctx: HandlerContext) -> None:
    """Settle the run that pushed the suite's head; the job ignores heads it did not push."""
    suite = event.data["check_suite"]
    if not str(suite.get("head_branch") or "").startswith(BRANCH_PREFIX):
        return
    installation_id = ctx.installation_id(event)
    if installation_id is not None:
        ctx.enqueue(
            settle_head_job(
                installation_id, event.data["repository"]["full_name"], suite["head_sha"]
            )
        )
