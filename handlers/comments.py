"""Issue and PR comments: `/baton ...` commands from maintainers."""

from __future__ import annotations

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.commands import parse_command
from bot.dispatch import command_job
from handlers.context import HandlerContext

router = Router()


@router.register("issue_comment", action="created")
async def command_posted(event: Event, ctx: HandlerContext) -> None:
    """Hand a new comment that holds a `/baton` command to a job (edits are not commands)."""
    comment = event.data["comment"]
    if event.data["sender"].get("type") == "Bot" or parse_command(comment.get("body")) is None:
        return
    issue = ctx.issue_ref(event)
    if issue is not None:
        ctx.enqueue(command_job(issue, int(comment["id"])))
