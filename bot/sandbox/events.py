"""Issue and pull request changes that GitHub announces with webhooks."""

from __future__ import annotations

from typing import Any

from bot.sandbox import pulls
from bot.sandbox.hub import Hub
from bot.sandbox.rest import Json
from bot.sandbox.state import Issue, IssueEvent, Label, Repo, utc_now


async def subject(hub: Hub, repo: Repo, issue: Issue) -> Json:
    """Render what a webhook about an issue or pull request carries."""
    if issue.pull is None:
        return {"issue": hub.render.issue(repo, issue)}
    facts = await pulls.facts(hub, repo, issue)
    return {"number": issue.number, "pull_request": hub.render.pull(repo, issue, facts)}


async def announce(
    hub: Hub, repo: Repo, issue: Issue, action: str, sender: str, **extra: Any
) -> None:
    """Send the `issues` or `pull_request` webhook for a change to an issue."""
    body = await subject(hub, repo, issue)
    body.update(extra)
    hub.emit(repo, "pull_request" if issue.pull else "issues", sender, body, action)


def touch(repo: Repo, issue: Issue) -> None:
    """Mark an issue (and its repository) as just updated."""
    issue.updated_at = repo.updated_at = utc_now()


def record(hub: Hub, issue: Issue, event: str, actor: str, label: str | None = None) -> None:
    """Add to the issue's events list, as GitHub records what happens to an issue."""
    issue.events.append(
        IssueEvent(
            id=hub.state.next_id(), actor=actor, event=event, created_at=utc_now(), label=label
        )
    )


def ensure_label(hub: Hub, repo: Repo, name: str) -> Label:
    """Return a repository label, creating it as GitHub does when an unknown one is applied."""
    found = repo.label(name)
    if found is None:
        found = Label(id=hub.state.next_id(), name=name)
        repo.labels.append(found)
    return found


async def add_labels(hub: Hub, repo: Repo, issue: Issue, names: list[str], sender: str) -> None:
    """Add labels to an issue; one `labeled` webhook per label it did not have."""
    for name in names:
        label = ensure_label(hub, repo, name)
        if label.name not in issue.labels:
            issue.labels.append(label.name)
            touch(repo, issue)
            record(hub, issue, "labeled", sender, label.name)
            await announce(hub, repo, issue, "labeled", sender, label=hub.render.label(repo, label))


async def remove_label(hub: Hub, repo: Repo, issue: Issue, name: str, sender: str) -> bool:
    """Take a label off an issue; False if it was not on it."""
    label = repo.label(name)
    if label is None or label.name not in issue.labels:
        return False
    issue.labels.remove(label.name)
    touch(repo, issue)
    record(hub, issue, "unlabeled", sender, label.name)
    await announce(hub, repo, issue, "unlabeled", sender, label=hub.render.label(repo, label))
    return True


async def replace_labels(hub: Hub, repo: Repo, issue: Issue, names: list[str], sender: str) -> None:
    """Make an issue's labels exactly `names` (adding before removing)."""
    wanted = {name.casefold() for name in names}
    current = list(issue.labels)
    await add_labels(hub, repo, issue, names, sender)
    for name in current:
        if name.casefold() not in wanted:
            await remove_label(hub, repo, issue, name, sender)


async def replace_assignees(
    hub: Hub, repo: Repo, issue: Issue, logins: list[str], sender: str
) -> None:
    """Make an issue's assignees exactly `logins`, announcing each change."""
    for login in [a for a in issue.assignees if a not in logins]:
        issue.assignees.remove(login)
        touch(repo, issue)
        await announce(hub, repo, issue, "unassigned", sender, assignee=hub.render.user(login))
    for login in [a for a in logins if a not in issue.assignees]:
        issue.assignees.append(login)
        touch(repo, issue)
        await announce(hub, repo, issue, "assigned", sender, assignee=hub.render.user(login))


async def edit(
    hub: Hub, repo: Repo, issue: Issue, sender: str, title: str | None, body: str | None
) -> None:
    """Change an issue's title and/or body; one `edited` webhook listing what changed."""
    changes: Json = {}
    if title is not None and title != issue.title:
        changes["title"] = {"from": issue.title}
        issue.title = title
    if body is not None and body != issue.body:
        changes["body"] = {"from": issue.body or ""}
        issue.body = body
    if changes:
        touch(repo, issue)
        await announce(hub, repo, issue, "edited", sender, changes=changes)


async def set_state(
    hub: Hub, repo: Repo, issue: Issue, state: str, reason: str | None, sender: str
) -> None:
    """Close or reopen an issue or pull request."""
    if state == issue.state:
        return
    touch(repo, issue)
    if state == "closed":
        issue.state = "closed"
        issue.closed_at = issue.updated_at
        if issue.pull is None:
            issue.state_reason = reason or "completed"
        else:
            issue.pull.base_sha = (
                await hub.git(repo).branch_tip(issue.pull.base_ref) or issue.pull.base_sha
            )
        record(hub, issue, "closed", sender)
        await announce(hub, repo, issue, "closed", sender)
    else:
        issue.state = "open"
        issue.closed_at = None
        if issue.pull is None:
            issue.state_reason = "reopened"
        record(hub, issue, "reopened", sender)
        await announce(hub, repo, issue, "reopened", sender)


async def mark_ready(hub: Hub, repo: Repo, issue: Issue, sender: str) -> None:
    """Take a draft pull request out of draft: its `ready_for_review` event and webhook."""
    pull = issue.pull
    assert pull is not None
    if not pull.draft:
        return
    pull.draft = False
    touch(repo, issue)
    record(hub, issue, "ready_for_review", sender)
    await announce(hub, repo, issue, "ready_for_review", sender)


async def change_base(hub: Hub, repo: Repo, issue: Issue, base: str, sender: str) -> None:
    """Retarget a pull request to another base branch."""
    pull = issue.pull
    assert pull is not None
    if base == pull.base_ref:
        return
    tips = await hub.git(repo).branches()
    changes = {
        "base": {"ref": {"from": pull.base_ref}, "sha": {"from": pulls.base_sha(issue, tips)}}
    }
    pull.base_ref = base
    pull.base_sha = tips[base]
    touch(repo, issue)
    await announce(hub, repo, issue, "edited", sender, changes=changes)
