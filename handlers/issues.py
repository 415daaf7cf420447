"""Issue events: the queue label starts a run, or a chain when the issue names one;
taking it (or the in-progress label) off withdraws the issue, and deleting the issue
ends its work.

The label event's issue is the text the agent works from: it goes to the run (or
chain) job, which records it. An edit of the title or body goes to a job that asks
who made it.
"""

from __future__ import annotations

import logging
from typing import Any

from gidgethub.routing import Router
from gidgethub.sansio import Event

from bot.domain.chains import names_a_chain
from bot.domain.issue_text import BODY_CAP, Snapshot, github_time, snapshot
from bot.domain.jobs import (
    issue_closed_job,
    issue_deleted_job,
    issue_edited_job,
    queue_chain_job,
    run_issue_job,
    withdrawn_job,
)
from bot.web.delivery import HandlerContext

log = logging.getLogger(__name__)
router = Router()


@router.register("issues", action="labeled")
async def queue_label_added(event: Event, ctx: HandlerContext) -> None:
    """Run the issue when a human puts the queue label on it; the job judges who did."""
    repo = event.data["repository"]["full_name"]
    if event.data["label"]["name"] != ctx.queue_label(repo) or ctx.sent_by_baton(event):
        return
    issue = ctx.issue_ref(event)
    if issue is None:
        return
    sender = str(event.data["sender"]["login"])
    text = _queued_text(event.data["issue"], sender)
    if names_a_chain(event.data["issue"].get("body"), issue.repo):
        ctx.enqueue(queue_chain_job(issue, event.delivery_id, sender, text))
    else:
        shown = [str(label["name"]) for label in event.data["issue"]["labels"]]
        ctx.enqueue(
            run_issue_job(
                ctx.settings, issue, event.delivery_id, queued_by=sender, text=text, labels=shown
            )
        )


def _queued_text(data: dict[str, Any], sender: str) -> Snapshot | None:
    """Return the issue's text as the label event carried it (None without GitHub's time)."""
    at = github_time(data.get("updated_at"))
    if at is None:
        return None
    return snapshot(str(data["title"]), data.get("body"), at, sender, "label")


@router.register("issues", action="edited")
async def issue_edited(event: Event, ctx: HandlerContext) -> None:
    """Have an edit of the issue's title or body judged: whose it is decides if it counts."""
    changed = [name for name in ("title", "body") if name in event.data["changes"]]
    if not changed or ctx.sent_by_baton(event):
        return
    issue = ctx.issue_ref(event)
    if issue is None:
        return
    data = event.data["issue"]
    at = github_time(data["updated_at"])
    if at is None:
        log.warning("delivery %s: an issue edit without GitHub's time; dropped", event.delivery_id)
        return
    queue_label = ctx.queue_label(issue.repo).casefold()
    labelled = any(str(label["name"]).casefold() == queue_label for label in data["labels"])
    ctx.enqueue(
        issue_edited_job(
            issue,
            str(event.data["sender"]["login"]),
            event.delivery_id,
            at,
            changed,
            str(data["title"]),
            (data.get("body") or "")[:BODY_CAP],
            labelled,
        )
    )


@router.register("issues", action="unlabeled")
async def label_taken_off(event: Event, ctx: HandlerContext) -> None:
    """Have a human's removal of a Baton label judged: the queue or in-progress label withdraws."""
    issue = ctx.issue_ref(event)
    if issue is None or ctx.sent_by_baton(event) or event.data.get("label") is None:
        return
    label = str(event.data["label"]["name"])
    sender = str(event.data["sender"]["login"])
    ctx.enqueue(withdrawn_job(issue, label, sender, event.delivery_id))


@router.register("issues", action="deleted")
async def issue_deleted(event: Event, ctx: HandlerContext) -> None:
    """End Baton's work on an issue a maintainer deleted."""
    issue = ctx.issue_ref(event)
    if issue is not None:
        ctx.enqueue(issue_deleted_job(issue))


@router.register("issues", action="closed")
async def issue_closed(event: Event, ctx: HandlerContext) -> None:
    """Stop any work on an issue a human closed; its labels come off, its work stays."""
    issue = ctx.issue_ref(event)
    if issue is not None and not ctx.sent_by_baton(event):
        ctx.enqueue(issue_closed_job(issue))
