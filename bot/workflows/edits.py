"""An edit of a queued issue's title or body: taken in from a steerer, noted from anyone else.

The decision is pure (`bot/domain/issue_text.py`); this module asks GitHub who made the
edit, records it, and says on the status comment what it changed for the agent.
"""

from __future__ import annotations

import logging

from bot.domain import issue_text as snapshot
from bot.domain import render
from bot.domain.effects import Effect, PostStatus, Report
from bot.domain.issue_text import Edit, IssueText
from bot.domain.model import IssueRef
from bot.edges.github import GitHubClient, github_app
from bot.workflows.execute import execute
from bot.workflows.services import Services
from bot.workflows.standing import repository_settings, standing_of

log = logging.getLogger(__name__)


async def issue_edited(
    services: Services,
    issue: IssueRef,
    made: Edit,
    title: str,
    body: str,
    queue_label_on: bool,
) -> Edit | None:
    """Record an edit of the issue (title and body as it left them); return it as judged.

    The edit counts for the brief when its author may steer Baton: only the fields
    it changed are taken, so a steerer's edit of the title takes in no one else's body.
    None when it changes nothing Baton works from.
    """
    store = services.store
    if snapshot.edit(store.queued_text(issue), made, queue_label_on) is None:
        log.info("%s: the edit by %s changes nothing Baton works from", issue, made.by)
        return None
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(issue.installation_id)
        settings = await repository_settings(gh, store, services.settings, issue.repo)
        standing = await standing_of(gh, store, settings, issue.repo, made.by)
        if standing.allowed:
            made = made.model_copy(
                update={
                    "taken": True,
                    "title": title if "title" in made.changed else None,
                    "body": body if "body" in made.changed else None,
                }
            )
        recorded = store.update_queued_text(
            issue, lambda current: snapshot.edit(current, made, queue_label_on)
        )
        if recorded is None:
            return None  # recorded by a repeat of this job meanwhile
        what = " and ".join(made.changed)
        if made.taken:
            log.info("%s: %s's edit of the %s is taken into the brief", issue, made.by, what)
        else:
            log.warning(
                "%s: %s's edit of the %s is not taken into the brief: %s",
                issue,
                made.by,
                what,
                standing,
            )
        await _show(services, gh, issue, recorded, settings.labels.queue)
    return made


async def _show(
    services: Services, gh: GitHubClient, issue: IssueRef, recorded: IssueText, queue_label: str
) -> None:
    """Say on the status comment what the edit means for the agent.

    Before the queueing's own start has recorded its text there is nothing to say
    yet: that start's status comment says it.
    """
    if recorded.queued is None:
        return
    run = services.store.latest_run(issue)
    shown: Effect
    if run is not None and not (run.state.is_terminal and run.started_at < recorded.queued.at):
        shown = Report(issue=issue, attempt=run.attempt)  # the run's, with the edit's line
    else:
        notes = snapshot.notes(recorded, queue_label)
        shown = PostStatus(issue=issue, body=render.queued_comment(notes))
    await execute(services, gh, (shown,))
