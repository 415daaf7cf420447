"""Check events: a completed suite on a head Baton pushed settles its run."""

from __future__ import annotations

from gidgethub.routing import Router
from gidgethub.sansio import Event

from handlers.context import HandlerContext

router = Router()


@router.register("check_suite", action="completed")
async def check_suite_completed(event: Event, ctx: HandlerContext) -> None:
    """Enqueue settlement when a suite completes on a head a Baton run pushed."""
    repo = event.data["repository"]["full_name"]
    head_sha = event.data["check_suite"]["head_sha"]
    installation_id = ctx.installation_id(event)
    if installation_id is not None and ctx.store.run_for_head(repo, head_sha) is not None:
        ctx.dispatch.settle_head(installation_id, repo, head_sha)
