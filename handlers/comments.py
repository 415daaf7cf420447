"""Issue and PR comments: `/baton ...` commands from maintainers."""

from __future__ import annotations

import logging

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.domain.commands import ignored_bot, parse_command
from bot.domain.jobs import command_job
from bot.web.delivery import HandlerContext

log = logging.getLogger(__name__)
router = Router()


@router.register("issue_comment", action="created")
async def command_posted(event: Event, ctx: HandlerContext) -> None:
    """Hand a new comment that holds a `/baton` command to a job."""
    comment = event.data["comment"]
    if parse_command(comment.get("body")) is None:
        return
    sender = event.data["sender"]
    login = str(sender.get("login") or "")
    if ignored_bot(login, sender.get("type"), ctx.settings.trusted_bots):
        log.info("delivery %s: ignored a command from the bot @%s", event.delivery_id, login)
        return
    issue = ctx.issue_ref(event)
    if issue is not None:
        ctx.enqueue(command_job(issue, int(comment["id"])))


@router.register("issue_comment", action="edited")
async def command_edited(event: Event, ctx: HandlerContext) -> None:
    """Say so when a command appears in an edit: only new comments command Baton."""
    if parse_command(event.data["comment"].get("body")) is not None:
        log.info("delivery %s: ignored a command in an edited comment", event.delivery_id)
