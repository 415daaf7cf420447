"""The edit job: an issue's title or body changed; whose edit it is decides if it counts."""

from __future__ import annotations

import asyncio
from typing import cast

from bot.domain.issue_text import Edit, TextField, github_time
from bot.domain.model import IssueRef
from bot.workflows import edits
from jobs import job, services


@job
def issue_edited(
    installation_id: int,
    repo: str,
    number: int,
    editor: str,
    delivery: str,
    edited_at: str,
    changed: str,
    title: str,
    body: str,
    queue_label_on: int,
) -> str:
    """Record an edit of an issue's title or body; return whether it was taken in or noted.

    changed names the fields the edit changed ("title", "body", comma-separated);
    title and body are the issue as the edit left it, at edited_at.
    """
    issue = IssueRef(installation_id=installation_id, repo=repo, number=number)
    at = github_time(edited_at)
    fields = tuple(
        cast(TextField, name) for name in changed.split(",") if name in ("title", "body")
    )
    if at is None or not fields:
        return "unreadable"
    made = Edit(at=at, by=editor, delivery=delivery, changed=fields, taken=False)
    judged = asyncio.run(
        edits.issue_edited(services(), issue, made, title, body, bool(queue_label_on))
    )
    if judged is None:
        return "unchanged"
    return "taken" if judged.taken else "noted"
